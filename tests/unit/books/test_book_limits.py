"""Untrusted books, bounded cost: every parser is linear on adversarial input, EPUB reads count
every decompressed byte, extracted text is counted, deep nesting is refused fast.

The timing assertions are the one kind of timing assertion in the suite: two timings taken in the
same run, each the best of three, interleaved, and only their ratio is asserted. Doubling an
input may at most about double the time (a ratio of 3 leaves slack for noise; a quadratic rule
gives 4, and on these inputs the old rules gave 4 or far more).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable

import pytest

from tests.support.epubs import minimal_epub, xhtml
from tests.support.linear import RATIO, TARGET_S, assert_linear, quiet, timed
from tts_queue.books.sources.archive import READ_BLOCK, UnpackBudget
from tts_queue.books.sources.chapter import Book, BookLimits, Chapter, select_chapters
from tts_queue.books.sources.epub import read_epub
from tts_queue.books.sources.parse import parse_book
from tts_queue.books.sources.plaintext import compile_pattern, read_plaintext
from tts_queue.books.sources.segment import segment_chapter, split_sentences
from tts_queue.books.sources.xhtml import MAX_DEPTH, parse_document
from tts_queue.errors import BookTooLarge, InvalidBook
from tts_queue.synthesis.frontend.markdown import markdown_blocks

PROSE = "It was a bright cold day in April, and the clocks were striking thirteen. "


# --- linearity --------------------------------------------------------------------------------


MARKDOWN_FAMILIES: dict[str, Callable[[int], str]] = {
    "table rule: a line of spaces": lambda n: "x\n" + " " * n + "x",
    "front matter: newlines then text": lambda n: "---" + "\n" * n + "x" * (25 * n),
    "ATX heading with a run of spaces": lambda n: "# a" + " " * n + "b",
    "links: [[[[": lambda n: "[" * n,
    "links: [a]( without )": lambda n: "[a](" * n,
    "images: ![![![": lambda n: "![" * n,
    "footnote references: [^[^[^": lambda n: "[^" * n,
    "autolinks without >": lambda n: "<http://" * n,
    "strong: __x __x": lambda n: "__x " * n,
    "strong: **x **x": lambda n: "**x " * n,
    "emphasis: *x *x": lambda n: "*x " * n,
    "emphasis: _x _x": lambda n: "_x " * n,
    "strikethrough: ~~x ~~x": lambda n: "~~x " * n,
    "comments: <!--<!--": lambda n: "<!--" * n,
    "inline code: a run of backticks": lambda n: "a" + "`" * n,
    "ordinary Markdown": lambda n: "## Title\n\nSome *emphasis*, **strong**, `code`, [a](http://x).\n\n" * n,
}


@pytest.mark.parametrize("family", list(MARKDOWN_FAMILIES))
def test_markdown_blocks_is_linear(family: str) -> None:
    # Given an adversarial Markdown input of size n and 2n
    # Then markdown_blocks takes at most about twice as long on the larger one
    assert_linear(MARKDOWN_FAMILIES[family], lambda text: markdown_blocks(str(text)), 512)


TEXT_FAMILIES: dict[str, tuple[bool, str | None, Callable[[int], str]]] = {
    "text: chapter lines without prose": (False, None, lambda n: "Chapter 1\n\n" * n + PROSE * 5),
    "text: ordinary prose": (False, None, lambda n: ("Chapter 1\n\n" + (PROSE * 4 + "\n") * 10 + "\n") * n),
    "text: the pattern that takes hours on re": (False, r"^(\w+\s?)+$",
                                                 lambda n: "Chapter one\n\n" + "a" * n + "!\n\n" + PROSE * 5),
    "markdown: headings without prose": (True, None, lambda n: "# a\n\n" * n + PROSE * 5),
    "markdown: front matter title with spaces": (
        True, None, lambda n: "---\ntitle: a" + " " * n + "b\n---\n" + PROSE * 5),
    "markdown: emphasis, through the whole parser": (
        True, "^Chapter", lambda n: "__x " * n + "\n\n" + PROSE * 5),
}


@pytest.mark.parametrize("family", list(TEXT_FAMILIES))
def test_read_plaintext_is_linear(family: str) -> None:
    # Given an adversarial text or Markdown book, with or without a split pattern
    markdown, pattern, build = TEXT_FAMILIES[family]
    # Then reading it is linear
    def read(text: object) -> object:
        return read_plaintext(str(text), markdown=markdown, split_pattern=pattern)

    assert_linear(build, quiet(read), 16)


def _headings_chapter(n: int) -> Chapter:
    return Chapter(1, "t", tuple(f"Part {i}" for i in range(n)), headings=tuple(range(n)))


# Paragraphs longer than PIECE_CHARS (2,000), so that pysbd sees them in pieces.
@pytest.mark.parametrize(("family", "build", "call", "n"), [
    ("a paragraph with no safe sentence end: 1. 2. 1. 2.", lambda n: "1. 2. " * n,
     lambda text: split_sentences(str(text)), 400),
    ("stray punctuation glued to one sentence", lambda n: "Hello there friend. " + "! " * n,
     lambda text: split_sentences(str(text)), 1000),
    ("one long sentence without punctuation", lambda n: "word " * n,
     lambda text: split_sentences(str(text), 40), 400),
    ("ordinary prose", lambda n: PROSE * n, lambda text: split_sentences(str(text)), 30),
    ("a chapter made of headings", _headings_chapter,
     lambda chapter: segment_chapter(chapter), 4),
])
def test_sentences_are_linear(family: str, build: Callable[[int], object], call: Callable[[object], object],
                              n: int) -> None:
    # Given text no sentence splitter sees in a real book, at size n and 2n
    # Then splitting it is linear (pysbd never sees more than a bounded piece)
    assert_linear(build, call, n)


XHTML_FAMILIES: dict[str, Callable[[int], str]] = {
    "line breaks in one paragraph": lambda n: xhtml("<p>" + "x<br>" * n + "</p>"),
    "images in one paragraph": lambda n: xhtml("<p>" + "x<img>" * n + "</p>"),
    "page numbers in one paragraph": lambda n: xhtml("<p>" + 'x<span class="pagenum">1</span>' * n + "</p>"),
    "paragraphs inside deep inline elements": lambda n: xhtml(
        ("<span>" * 50 + "<p>x</p>" + "</span>" * 50) * n),
}


@pytest.mark.parametrize("family", list(XHTML_FAMILIES))
def test_parse_document_is_linear(family: str) -> None:
    # Given an adversarial content document of size n and 2n
    # Then parse_document is linear (the tree is never modified, no per-ancestor rescans)
    slow_to_show = family in ("line breaks in one paragraph", "images in one paragraph")  # quadratic before
    target = 0.04 if slow_to_show else TARGET_S
    assert_linear(XHTML_FAMILIES[family], lambda doc: parse_document(str(doc)), 4, target)


def test_select_chapters_is_linear_in_the_spec_and_the_book() -> None:
    # Given a book of n chapters and a spec naming all of them n times
    def build(n: int) -> tuple[Book, str]:
        book = Book("b", tuple(Chapter(i, "t", ("p",)) for i in range(1, n + 1)))
        return book, ",".join([f"1-{n}"] * n)

    # Then selecting is linear in both (not their product)
    assert_linear(build, lambda args: select_chapters(*args), 64)  # type: ignore[misc]


@pytest.mark.parametrize(("family", "build"), [
    ("many documents, each in the navigation", lambda n: minimal_epub(
        [xhtml(f"<h1>C{i}</h1><p>{PROSE * 3}</p>") for i in range(n)],
        nav=[(i, f"C{i}", None) for i in range(n)])),
    ("one document entered at many anchors", lambda n: minimal_epub(
        [xhtml("".join(f'<h2 id="a{i}">C{i}</h2><p>{PROSE * 3}</p>' for i in range(n)))],
        nav=[(0, f"C{i}", f"a{i}") for i in range(n)])),
])
def test_read_epub_is_linear(family: str, build: Callable[[int], bytes]) -> None:
    # Given EPUBs with n and 2n documents or navigation entries
    # Then reading them is linear (no search of every item or entry per document)
    assert_linear(build, quiet(lambda data: parse_book(bytes(data))), 8)  # type: ignore[call-overload]


# --- deep nesting -----------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [500, 5_000])
def test_deep_nesting_is_a_clean_error_and_fast(depth: int) -> None:
    # Given a content document nested thousands of levels deep (RecursionError before), and a flat
    # document of the same size as the peer to time it against
    document = xhtml("<div>" * depth + "text" + "</div>" * depth)
    flat = xhtml("<p>text</p>" * (len(document) // 11))
    # Then it is refused with InvalidBook, alone or inside an EPUB
    with pytest.raises(InvalidBook, match=f"more than {MAX_DEPTH} deep"):
        parse_document(document)
    with pytest.raises(InvalidBook, match="deep"):
        parse_book(minimal_epub([document]))
    # And at once: no slower than reading the flat document of the same size (best of five)
    refused = min(timed(quiet(lambda text: parse_document(str(text))), document) for _ in range(5))
    read = min(timed(lambda text: parse_document(str(text)), flat) for _ in range(5))
    assert refused <= RATIO * read, f"refused in {refused * 1e3:.1f} ms, flat read in {read * 1e3:.1f} ms"


def test_nesting_within_the_bound_is_read() -> None:
    # Given a document nested deep, but within the bound, in elements that hold blocks
    depth = MAX_DEPTH - 10
    document = xhtml("<div>" * depth + f"<p>{PROSE}</p>" + "</div>" * depth)
    # Then its paragraph is read
    assert [b.text for b in parse_document(document).blocks] == [PROSE.strip()]


# --- EPUB limits ------------------------------------------------------------------------------


def test_every_read_of_an_entry_counts() -> None:
    # Given an EPUB whose 20 manifest items all point at one 1 MB document: the central
    # directory says it unpacks to about 1 MB, ebooklib reads the document 20 times
    document = xhtml("<p>" + "word " * 200_000 + "</p>")
    data = minimal_epub([document], repeat=20)
    assert sum(i.file_size for i in zipfile.ZipFile(io.BytesIO(data)).infolist()) < 1_100_000
    # Then a 5 MB limit on unpacked bytes refuses it, with a clear message
    with pytest.raises(BookTooLarge, match="the EPUB unpacks to more than 5000000 bytes"):
        parse_book(data, limits=BookLimits(unpacked_bytes=5_000_000, chars=10_000_000))
    # And the same document named once is read
    book = parse_book(minimal_epub([document]), limits=BookLimits(unpacked_bytes=5_000_000, chars=10_000_000))
    assert book.word_count == 200_000


def test_the_central_directory_is_checked_before_reading() -> None:
    # Given an EPUB whose entries say they unpack to more than the limit
    data = minimal_epub([xhtml("<p>" + "0" * 3_000_000 + "</p>")])
    # Then it is refused before a byte is decompressed
    with pytest.raises(BookTooLarge, match="unpacks to more than 1000000 bytes"):
        read_epub(data, limits=BookLimits(unpacked_bytes=1_000_000, chars=10_000_000))


def test_a_read_stops_one_block_past_the_limit() -> None:
    # Given an entry that unpacks to 10 MB and a budget of 1 MB
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("big", b"\0" * 10_000_000)
    budget = UnpackBudget(1_000_000)
    # Then reading it stops with BookTooLarge, having decompressed at most the limit and a block
    with zipfile.ZipFile(buffer) as archive, pytest.raises(BookTooLarge):
        budget.read(archive, "big")
    assert budget.used <= 1_000_000 + READ_BLOCK


def test_spine_listing_a_document_again_counts_it_again() -> None:
    # Given an EPUB whose spine reads one 300 KB document 40 times (parsed 40 times)
    document = xhtml("<p>" + PROSE * 4000 + "</p>")
    limits = BookLimits(unpacked_bytes=5_000_000, chars=100_000_000)
    # Then the parses count against the unpacked limit
    with pytest.raises(BookTooLarge, match="unpacks to more than"):
        parse_book(minimal_epub([document], reads=40), limits=limits)
    assert len(parse_book(minimal_epub([document]), limits=limits).chapters) == 1


@pytest.mark.parametrize(("filename", "data"), [
    ("book.txt", (PROSE * 100).encode()),
    ("book.md", ("# One\n\n" + PROSE * 100).encode()),
    ("book.epub", minimal_epub([xhtml(f"<p>{PROSE * 100}</p>")])),
])
def test_characters_of_text_are_limited_in_every_format(filename: str, data: bytes) -> None:
    # Given a book of about 7,500 characters in each format
    # Then a 5,000-character limit refuses it with a clear message, and a 10,000 one reads it
    with pytest.raises(BookTooLarge, match="the book has more than 5000 characters of text"):
        parse_book(data, filename, limits=BookLimits(unpacked_bytes=10_000_000, chars=5_000))
    assert parse_book(data, filename, limits=BookLimits(unpacked_bytes=10_000_000, chars=10_000)).word_count


def test_no_limits_means_only_the_built_in_bounds() -> None:
    # Given a large text and no limits
    book = parse_book((PROSE * 20_000).encode(), "big.txt")
    # Then it is read whole
    assert book.word_count == 20_000 * len(PROSE.split())


# --- the caller's pattern ---------------------------------------------------------------------


def test_split_pattern_runs_on_re2() -> None:
    # Given the pattern and text that take hours on Python's re
    def text(n: int) -> str:
        return "Chapter one\n\n" + "a" * n + "!\n\n" + PROSE * 5

    # Then the book is read, and in time linear in the run of letters (a backtracking engine
    # doubles its time with each letter more: 2^40 steps at 40)
    read_plaintext(text(40), markdown=False, split_pattern=r"^(\w+\s?)+$")
    assert_linear(text, lambda value: read_plaintext(str(value), markdown=False,
                                                     split_pattern=r"^(\w+\s?)+$"), 40)
    # And compile_pattern validates a pattern on its own, cheaply
    assert compile_pattern(r"^Chapter \d+$") is not None
    assert compile_pattern("   ") is None
