"""Books: a story and a whole book through the service, a book of any size, chapter assembly, read-
along EPUBs, text processing, the M4B's coder."""

from __future__ import annotations

from bench.scenarios.books import (  # noqa: F401
    assembly,
    book,
    book_memory,
    book_scale,
    ingest,
    m4b_coder,
    readalong,
    readalong_hostile,
)
