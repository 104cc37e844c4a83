"""The books the scenarios read: the sample EPUB (The Adventures of Sherlock Holmes, beside the
checkout in ``../shared/data``; ``TTS_TEST_EPUB`` names another), or, for quick forms, a small
EPUB made here of a few chapters of the scenarios' sentences."""

from __future__ import annotations

import io
import os
from pathlib import Path

from bench.harness.texts import SENTENCES
from bench.harness.tree import ROOT


def sample_epub() -> Path:
    """The sample EPUB's path (``FileNotFoundError`` where it is not)."""
    beside = ROOT.parent / "shared" / "data" / "sherlock-holmes.epub"
    shared = "/work/shared/data/sherlock-holmes.epub"
    for candidate in (os.environ.get("TTS_TEST_EPUB", ""), str(beside), shared):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise FileNotFoundError("the sample EPUB is not beside the checkout (../shared/data/"
                            "sherlock-holmes.epub): set TTS_TEST_EPUB to its path")


def small_epub(chapters: int = 2, sentences: int = 6) -> bytes:
    """An EPUB 3 of ``chapters`` short chapters, each a title and ``sentences`` sentences in two
    paragraphs (ebooklib)."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("bench-small")
    book.set_title("A Small Book")
    book.set_language("en")
    book.add_author("The Bench")
    items = []
    for number in range(1, chapters + 1):
        said = [SENTENCES[(number * 7 + n) % len(SENTENCES)] for n in range(sentences)]
        half = len(said) // 2
        body = (f"<h1>Chapter {number}</h1><p>{' '.join(said[:half])}</p><p>{' '.join(said[half:])}</p>")
        item = epub.EpubHtml(title=f"Chapter {number}", file_name=f"chapter{number}.xhtml", lang="en")
        item.content = f'<html xmlns:epub="http://www.idpf.org/2007/ops"><body>{body}</body></html>'
        book.add_item(item)
        items.append(item)
    book.toc = tuple(epub.Link(i.file_name, i.title, f"c{n}") for n, i in enumerate(items))
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *items]
    buffer = io.BytesIO()
    epub.write_epub(buffer, book)
    return buffer.getvalue()


def book_path(quick: bool, folder: Path, chapters: int = 2, sentences: int = 6) -> Path:
    """The sample EPUB, or in a quick form a small one written into ``folder``."""
    if not quick:
        return sample_epub()
    path = folder / "small.epub"
    path.write_bytes(small_epub(chapters, sentences))
    return path
