"""A read-along build from a hostile EPUB costs what its bytes are worth, and no more than its budget:

- every parse and walk of a source is linear in its bytes: an unterminated CDATA section after
  each other, attributes by the thousand, ids that look like ours, unknown or removed elements
  by the thousand with their text around them, entity references in a row, sentences the
  sanitizer removed (``tests/support/linear.py``'s timing: two sizes, the ratio only);
- a document's letter positions are held in machine integers, not a list of objects;
- text that is never read aloud (a footnote) counts against ``TTS_MAX_BOOK_CHARS`` at ingestion;
- in a worker, the build runs in a child process (``workers.readalong``): one that runs past its
  time is killed, one that asks for more than its memory fails, each with ``epub_over_budget``.

The allowlist's rules are in ``test_sanitize.py``; whole builds from hostile sources in
``test_readalong_source.py``; the route's answers through a real worker in
``tests/service/test_books_untrusted.py``.
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from lxml import etree

from tests.support.epubs import minimal_epub, xhtml
from tests.support.linear import assert_linear, quiet
from tts_queue.books.readalong.from_source import free_prefix, taken_prefixes
from tts_queue.books.readalong.job import BookIdentity, SourceJob
from tts_queue.books.readalong.sanitize import clean_document
from tts_queue.books.readalong.textmarks import Aligner, FlatText
from tts_queue.books.readalong.tree import MAX_ATTRIBUTES, parse_xml
from tts_queue.books.sources.chapter import BookLimits
from tts_queue.books.sources.parse import parse_book
from tts_queue.errors import BookTooLarge, EpubOverBudget, InvalidBook
from workers import readalong

HTML = '<html xmlns="http://www.w3.org/1999/xhtml"><head><title>t</title></head><body>'


def cleaned(data: bytes) -> etree._Element:
    """``data`` parsed and cleaned as a document nothing else is shipped beside."""
    root = parse_xml(data)
    clean_document(root, "text/a.xhtml", lambda path: None)
    return root


PARSE_FAMILIES: dict[str, Callable[[int], bytes]] = {
    "unterminated CDATA sections after a reference": lambda n: (
        b'<svg xmlns="http://www.w3.org/2000/svg">&amp;' + b"<![CDATA[x" * n + b"</svg>"),
    "attributes on one element": lambda n: (
        HTML + "<p " + " ".join(f'a{i}="v"' for i in range(n)) + ">x</p></body></html>").encode(),
    "entity references in a row": lambda n: (
        '<!DOCTYPE html [<!ENTITY e "x">]>' + HTML + "<p><b/>" + "&e;" * n + "</p></body></html>").encode(),
}


@pytest.mark.parametrize("family", PARSE_FAMILIES)
def test_parse_xml_is_linear(family: str) -> None:
    # Given documents of n and 2n hostile parts: the time parsing them takes is linear in them
    assert_linear(PARSE_FAMILIES[family], quiet(parse_xml), 256)  # type: ignore[arg-type]


CLEAN_FAMILIES: dict[str, Callable[[int], str]] = {  # a paragraph's content
    "unknown elements side by side, text after each": lambda n: "<foo>x</foo>tail" * n,
    "scripts side by side, text after each": lambda n: "<script>x</script>tail" * n,
}


@pytest.mark.parametrize("family", CLEAN_FAMILIES)
def test_cleaning_a_document_is_linear(family: str) -> None:
    # Given documents of n and 2n unknown or removed elements with their text around them
    # Then cleaning them takes linear time (each element judged once, each text written once)
    def document(n: int) -> bytes:
        return f"{HTML}<p>{CLEAN_FAMILIES[family](n)}</p></body></html>".encode()

    assert_linear(document, cleaned, 256)  # type: ignore[arg-type]


def test_the_prefix_of_our_ids_is_found_in_linear_time() -> None:
    # Given a document's ids: n prefixes ours would take, in order, then other ids
    def ids(n: int) -> list[str]:
        return [f"ra{k or ''}-" for k in range(n)] + [f"ra{k}x" for k in range(n)]

    # Then the prefix found is the first free one, found in time linear in the ids
    assert free_prefix(taken_prefixes(ids(3))) == "ra3-"
    assert free_prefix(taken_prefixes(["ra12-a", "ra-b", "ra01-c", "r-a"])) == "ra1-"
    assert_linear(ids, lambda value: free_prefix(taken_prefixes(value)), 256)  # type: ignore[arg-type]


def test_sentences_the_sanitizer_removed_cost_linear_time() -> None:
    # Given a document's letters and n spoken sentences none of which is in them (text the
    # sanitizer removed: a form's labels, say), then finding all of them is linear in n
    def book(n: int) -> tuple[str, list[str]]:
        return "x" * (200 * n), [f"A sentence {k} that only a removed form held." for k in range(n)]

    def align(value: tuple[str, list[str]]) -> None:
        aligner = Aligner([value[0]])
        assert all(aligner.find([0], sentence) is None for sentence in value[1])

    assert_linear(book, align, 64)  # type: ignore[arg-type]


def test_letter_positions_take_machine_integers() -> None:
    # Given a document of 40,000 letters in a few paragraphs (a footnote's text)
    root = parse_xml((HTML + ("<p>" + "abcd efgh " * 1000 + "</p>") * 5 + "</body></html>").encode())
    # When its text is read for marking
    tracemalloc.start()
    flat = FlatText(root)
    held, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # Then every letter is found, and reading it holds under 12 bytes per letter (a list of Python
    # ints held about 39), under 30 at its peak (it was about 49)
    assert len(flat.at) == len(flat.letters) == 40_000
    assert flat.text[flat.at[-1]] == "h"
    assert held / len(flat.letters) < 12 and peak / len(flat.letters) < 30, (held, peak)


def test_text_never_read_aloud_counts_against_the_book_limit() -> None:
    # Given an EPUB of one spoken paragraph and a footnote of 30,000 letters
    spoken = "A paragraph of some twenty words is read aloud, one after another, to the end of it. " * 2
    footnote = '<aside epub:type="footnote"><p>' + "note " * 6000 + "</p></aside>"
    document = xhtml(f"<h1>One</h1><p>{spoken}</p>{footnote}")
    data = minimal_epub([document.replace("<html>", '<html xmlns:epub="http://www.idpf.org/2007/ops">')])
    # When it is read within a limit of 20,000 characters, it is too large, though the spoken
    # text is a few hundred; within 40,000 it is read, the footnote unspoken
    with pytest.raises(BookTooLarge):
        parse_book(data, "a.epub", limits=BookLimits(unpacked_bytes=10_000_000, chars=20_000))
    book = parse_book(data, "a.epub", limits=BookLimits(unpacked_bytes=10_000_000, chars=40_000))
    assert book.word_count < 50


def job_at(tmp_path: Path, upload: Path) -> SourceJob:
    """A job over ``upload``, its EPUB in ``tmp_path``."""
    return SourceJob(str(upload), str(tmp_path / "book.epub"), BookIdentity("b1", "T", None), ((1, "One"),),
                     "en", "a voice", datetime(2026, 12, 6, tzinfo=timezone.utc), (), None)


def test_a_build_past_its_time_is_killed(tmp_path: Path) -> None:
    # Given a child that would run for a minute (a build that never ends)
    upload = tmp_path / "upload.epub"
    upload.write_bytes(b"")
    started = time.monotonic()
    # When it runs within a budget of half a second, then it is stopped with the budget's code
    with pytest.raises(EpubOverBudget, match="TTS_READALONG_TIMEOUT_S"):
        readalong.build(job_at(tmp_path, upload), timeout_s=0.5, max_memory_mb=0,
                        command=[sys.executable, "-c", "import time; time.sleep(60)"])
    assert time.monotonic() - started < 30
    assert not list(tmp_path.glob("*.json"))  # its job file is gone


def test_a_build_past_its_memory_fails_in_its_child(tmp_path: Path) -> None:
    # Given a source larger than the child's memory budget (a sparse file: nothing on disk)
    upload = tmp_path / "upload.epub"
    with open(upload, "wb") as file:
        file.truncate(600 * 1024 * 1024)
    # When the real child builds it within 300 MB, then it fails with the budget's code
    with pytest.raises(EpubOverBudget, match="TTS_READALONG_MAX_MEMORY_MB"):
        readalong.build(job_at(tmp_path, upload), timeout_s=60, max_memory_mb=300)


def test_a_document_over_the_attribute_bound_is_refused() -> None:
    # An element with more attributes than any EPUB's is refused (its document is not reused)
    with pytest.raises(InvalidBook, match="attributes"):
        parse_xml(PARSE_FAMILIES["attributes on one element"](MAX_ATTRIBUTES + 1))
    assert len(parse_xml(PARSE_FAMILIES["attributes on one element"](MAX_ATTRIBUTES))[1][0].attrib) == 256
