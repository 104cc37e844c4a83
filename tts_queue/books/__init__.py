"""Audiobooks: a whole book in, chapter files, captions and an M4B out.

Pure parts first: ``source`` sniffs and parses an upload (``epub`` + ``xhtml``, ``plaintext`` +
``markdown``) into a ``chapter.Book``; ``segment`` cuts chapters into sentences; ``stitch`` joins a
chapter's sentence audio; ``words`` and ``captions`` give word timings and SRT/WebVTT. Then the
parts with rows: ``service`` turns a book into one ordinary cached task per sentence, ``progress``
reports it, ``assembler`` builds each chapter once its sentences are done. Books sit on top of
tasks, storage and synthesis; nothing below imports them.
"""

from __future__ import annotations
