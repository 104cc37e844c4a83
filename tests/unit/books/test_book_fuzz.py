"""Property-based fuzzing of book parsing: whatever the input (odd Markdown, odd Unicode, lone
surrogates, invalid patterns, nested markup, broken or repeated EPUB entries, garbage), only the
project's own errors come out, and every example finishes within a time budget.

Reproducible and bounded for CI: ``derandomize=True``, a fixed ``max_examples`` per property, no
example database, hypothesis' own deadline off in favour of a budget that names the input.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.epubs import minimal_epub
from tts_queue.books.sources.chapter import BookLimits, Chapter
from tts_queue.books.sources.parse import parse_book
from tts_queue.books.sources.plaintext import compile_pattern, read_plaintext
from tts_queue.books.sources.segment import segment_chapter, split_sentences
from tts_queue.books.sources.xhtml import parse_document
from tts_queue.errors import BookError, InvalidRequest
from tts_queue.synthesis.frontend.markdown import markdown_blocks
from tts_queue.synthesis.frontend.markdown_inline import strip_inline

# A budget per call, as a multiple of the time this machine takes now to read a plain book of 64 KB:
# a parse that blows up on some input (quadratic or worse) exceeds it by orders of magnitude. Times
# are this thread's CPU time, so other processes sharing the cores do not count.
BUDGET_TIMES = 100


def _reference_s() -> float:
    text = "It was a bright cold day in April, and the clocks were striking thirteen.\n\n" * 850
    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        parse_book(text.encode(), "reference.txt")
        best = min(best, time.thread_time() - start)
    return best


BUDGET_S = max(0.05, BUDGET_TIMES * _reference_s())


def fuzz(examples: int) -> settings:
    """Hypothesis settings: ``examples`` examples, reproducible, no deadline of its own."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _timed(call: Callable[[], object]) -> float:
    start = time.thread_time()
    try:
        call()
    except (BookError, InvalidRequest):
        pass
    return time.thread_time() - start


def within_budget(call: Callable[[], object], shown: object) -> None:
    """Run ``call``: it may raise only the project's own errors, and must finish in ``BUDGET_S``
    (``BUDGET_TIMES`` the reference parse measured in this run). A call over it is timed again
    beside a fresh reference, as the machine is now (other processes share its cores): a parse
    that blows up exceeds that budget too, a burst of load does not."""
    elapsed = _timed(call)
    if elapsed >= BUDGET_S:
        budget = max(BUDGET_S, BUDGET_TIMES * _reference_s())
        elapsed = _timed(call)
        assert elapsed < budget, f"{elapsed:.2f} s (budget {budget:.2f} s) on {shown!r:.500}"


# --- strategies -------------------------------------------------------------------------------

ODD = ["\ud800", "\udfff", "\ud83d", "\ue000", "\ue001", "\ue0001\ue001", "\u00ad", "\u200b", "\ufeff",
       "\x00", "\u2028", "\x85", "\x0b", "\r", "\r\n", "İ", "ß", "ﬁ", "٣", "①", "Ⅻ", "½", "\u0301", "😀",
       "\U0010ffff", "&amp;", "&#0;", "&#xD800;", "&#99999999;", "\\*", "\\_", "\\`"]
MARKUP = list("#*_`[]()!<>-|:~\\^ \n\t.,;?\"'“”‘’—…") + ["**", "__", "~~", "```", "<!--", "-->", "![", "[^",
                                                       "](", "<http://", "</b>", "<i>", "1.", "a.", "Mr."]
WORDS = ["Chapter", "chapter one", "CHAPTER IV", "Part Two", "Book 3", "title:", "---", "...", "word", "The",
         "Holmes", "e.g.", "St.", "1", "IV", "a", "quite long sentence here",
         "*** START OF THE PROJECT GUTENBERG"]
PIECES = st.one_of(st.sampled_from(ODD), st.sampled_from(MARKUP), st.sampled_from(WORDS), st.characters())
SHORT_TEXT = st.lists(PIECES, max_size=60).map("".join)
LINE_STARTS = ["", "# ", "## ", "####### ", "- ", "* ", "1. ", "> ", ">> ", "| ", "|---|---|", "---", "===",
               "```", "~~~", "    ", "[x]: http://y", "[^1]: note", "title: ", "Chapter ", "<!-- ", "-->"]
LINES = st.tuples(st.sampled_from(LINE_STARTS), SHORT_TEXT).map("".join)
DOCUMENT = st.lists(LINES, max_size=40).map("\n".join)
# A short unit repeated: the inputs where a super-linear rule shows.
REPEATED = st.tuples(st.lists(PIECES, min_size=1, max_size=6).map("".join), st.integers(1, 3000)).map(
    lambda unit_times: (unit_times[0] * unit_times[1])[:20_000])
TEXT = st.one_of(SHORT_TEXT, DOCUMENT, REPEATED)
PATTERNS = st.sampled_from([None, "", "   ", r"^Chapter", r"^~ \d+ ~$", r"^(\w+\s?)+$", r"(a)\1", r"(?<=a)b",
                            r"(?=x)", "(unclosed", "^$|x", "*bad", "\ud800", "a{1001}", r"\pL+", ".*", "x",
                            r"(?i)^part\b", "[", r"\Q*\E"])
LIMITS = st.one_of(st.none(), st.builds(BookLimits, unpacked_bytes=st.integers(0, 400_000),
                                        chars=st.integers(0, 5_000)))

TAGS = ["p", "div", "span", "section", "aside", "h1", "h2", "hgroup", "sup", "a", "br", "img", "nav",
        "script", "style", "table", "tr", "td", "ul", "li", "ruby", "rt", "b", "i", "blockquote", "hr", "svg",
        "body"]
ATTRIBUTES = st.dictionaries(
    st.sampled_from(["id", "class", "epub:type", "role", "href", "title"]),
    st.sampled_from(["", "n1", "ch1", "pagenum", "pg-boilerplate", "x y", "footnote", "noteref", "chapter",
                     "toc", "pagebreak", "bodymatter", "doc-noteref", "#n1", "#", "c1.xhtml", "http://x",
                     "\ud800", "\"'<>&"]),
    max_size=3)


def _element(tag: str, attributes: dict[str, str], children: list[str]) -> str:
    shown = "".join(f' {name}="{value}"' for name, value in attributes.items())
    return f"<{tag}{shown}>{''.join(children)}</{tag}>"


NODES = st.recursive(
    st.one_of(SHORT_TEXT.map(lambda text: text.replace("<", "&lt;")), st.sampled_from(ODD + MARKUP + WORDS)),
    lambda children: st.builds(_element, st.sampled_from(TAGS), ATTRIBUTES, st.lists(children, max_size=4)),
    max_leaves=40)
BODY = st.lists(NODES, max_size=8).map("".join)
NESTED = st.tuples(st.sampled_from(["div", "span", "sup", "p", "a", "section"]), st.integers(0, 600),
                   BODY).map(lambda t: f"<{t[0]}>" * t[1] + t[2] + f"</{t[0]}>" * t[1])
XHTML = st.one_of(BODY, NESTED, SHORT_TEXT).map(
    lambda body: f'<html xmlns:epub="http://www.idpf.org/2007/ops"><head><title>T</title></head>'
                 f"<body>{body}</body></html>")


def _encode(text: str, encoding: str) -> bytes:
    return text.encode(encoding, errors="surrogatepass" if encoding.startswith("utf") else "replace")


# --- text and Markdown ------------------------------------------------------------------------


@fuzz(250)
@given(text=TEXT, markdown=st.booleans(), pattern=PATTERNS, limits=LIMITS)
def test_read_plaintext_raises_only_book_errors(text: str, markdown: bool, pattern: str | None,
                                               limits: BookLimits | None) -> None:
    # Given any text, as text or Markdown, with or without a valid or invalid split pattern
    # Then reading it gives a book or a book error, in time
    within_budget(lambda: read_plaintext(text, markdown=markdown, split_pattern=pattern, limits=limits),
                  (text, markdown, pattern, limits))


@fuzz(200)
@given(text=TEXT)
def test_markdown_blocks_and_inline_markup_never_fail(text: str) -> None:
    # Given any text
    # Then Markdown blocks and inline stripping return, in time, and keep no lone surrogate
    def run() -> None:
        blocks = markdown_blocks(text)
        for block in blocks:
            block.text.encode()
        strip_inline(text)

    within_budget(run, text)


@fuzz(60)
@given(pattern=st.one_of(PATTERNS, st.text(max_size=40)))
def test_compile_pattern_raises_only_invalid_book(pattern: str | None) -> None:
    # Given any pattern
    # Then it compiles (RE2) or is refused as InvalidBook
    within_budget(lambda: compile_pattern(pattern), pattern)


@fuzz(120)
@given(data=st.one_of(TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")),
                      st.tuples(TEXT, st.sampled_from(["utf-8", "utf-16", "cp1252", "latin-1"])).map(
                          lambda t: _encode(*t)),
                      st.binary(max_size=400)),
       filename=st.sampled_from([None, "b.txt", "b.md", "b.epub", "b"]),
       input_format=st.sampled_from([None, "text", "markdown", "epub", "pdf"]),
       pattern=PATTERNS, limits=LIMITS)
def test_parse_book_on_any_bytes_raises_only_book_errors(data: bytes, filename: str | None,
                                                         input_format: str | None, pattern: str | None,
                                                         limits: BookLimits | None) -> None:
    # Given any bytes under any name and format
    # Then parse_book gives a book or one of the project's errors, in time
    within_budget(lambda: parse_book(data, filename, input_format, pattern, limits=limits),
                  (data[:300], filename, input_format, pattern))


# --- sentences --------------------------------------------------------------------------------


@fuzz(150)
@given(text=TEXT, max_chars=st.integers(0, 400))
def test_split_sentences_never_fails(text: str, max_chars: int) -> None:
    # Given any text and limit
    # Then the sentences fit the limit and encode, or the limit is refused, in time
    def run() -> None:
        for sentence in split_sentences(text, max_chars):
            assert len(sentence) <= max_chars
            sentence.encode()

    within_budget(run, (text, max_chars))


@fuzz(40)
@given(paragraphs=st.lists(TEXT, max_size=6), headings=st.lists(st.integers(0, 8), max_size=4))
def test_segment_chapter_never_fails(paragraphs: list[str], headings: list[int]) -> None:
    # Given a chapter of any paragraphs
    chapter = Chapter(1, "t", tuple(paragraphs), tuple(headings))
    # Then it segments, in time
    within_budget(lambda: segment_chapter(chapter), chapter)


# --- XHTML and EPUB ---------------------------------------------------------------------------


@fuzz(200)
@given(document=XHTML, encoding=st.sampled_from([None, "utf-8", "utf-16", "cp1252"]))
def test_parse_document_raises_only_book_errors(document: str, encoding: str | None) -> None:
    # Given any content document (nested tags, odd attributes and text, deep nesting), as text or bytes
    content: str | bytes = document if encoding is None else _encode(document, encoding)
    # Then its blocks come back (no lone surrogates), or InvalidBook, in time
    def run() -> None:
        for block in parse_document(content).blocks:
            block.text.encode()

    within_budget(run, content)


def _mutate(data: bytes, how: str, at: int, junk: bytes) -> bytes:
    """``data`` truncated, with bytes overwritten, or replaced by ``junk``."""
    cut = at % (len(data) + 1)
    if how == "truncate":
        return data[:cut]
    if how == "overwrite":
        return data[:cut] + junk + data[cut + len(junk):]
    if how == "garbage":
        return b"PK\x03\x04" + junk
    return data


@fuzz(120)
@given(documents=st.lists(XHTML, min_size=1, max_size=3), repeat=st.integers(1, 20), reads=st.integers(1, 3),
       with_nav=st.booleans(), how=st.sampled_from(["keep", "keep", "truncate", "overwrite", "garbage"]),
       at=st.integers(0, 1 << 20), junk=st.binary(min_size=1, max_size=64), limits=LIMITS)
def test_parse_book_on_generated_epubs_raises_only_book_errors(
        documents: list[str], repeat: int, reads: int, with_nav: bool, how: str, at: int, junk: bytes,
        limits: BookLimits | None) -> None:
    # Given a minimal EPUB of generated documents: items repeated in the manifest, documents read
    # several times by the spine, with or without navigation, then kept, truncated or damaged
    nav: list[tuple[int, str, str | None]] | None = (
        [(i, f"Part {i}", None) for i in range(len(documents))] if with_nav else None)
    encoded = [_encode(document, "utf-8") for document in documents]  # lone surrogates stay, as bad bytes
    data = _mutate(minimal_epub(encoded, repeat=repeat, reads=reads, nav=nav), how, at, junk)
    # Then parse_book gives a book or one of the project's errors, in time
    within_budget(lambda: parse_book(data, "fuzz.epub", limits=limits), (documents, repeat, reads, how, at))
