"""Audiobook rendering, pure parts: book parsing, sentence segmentation, stitching and captions.

``source.parse_book`` turns an upload into a ``chapter.Book``; ``segment`` cuts chapters into
sentences; ``stitch`` assembles a chapter's sentence audio; ``captions`` writes SRT and WebVTT.
Nothing here does network or database I/O, and nothing imports a web or queue framework.
"""

from __future__ import annotations
