"""Plain text and Markdown books: chapter detection, markup stripping, chapter ranges, bad input."""

from __future__ import annotations

import pytest

from tts_queue.books.sources.chapter import Book, Chapter, select_chapters
from tts_queue.books.sources.parse import compile_pattern, detect_format, parse_book
from tts_queue.books.sources.plaintext import read_plaintext
from tts_queue.errors import EmptyBook, InvalidBook, InvalidRequest, UnknownChapters
from tts_queue.synthesis.frontend.markdown import markdown_blocks
from tts_queue.synthesis.frontend.markdown_inline import strip_inline

PROSE = ("Alice was beginning to get very tired of sitting by her sister on the bank, and of "
         "having nothing to do: once or twice she had peeped into the book her sister was reading.")


def test_chapter_lines_in_roman_digits_and_words() -> None:
    # Given a text with a title line, a short preface and chapter lines in three styles
    text = (
        "The Tale\n\nBy Someone\n\n"
        "CHAPTER I.\nDown the Rabbit-Hole\n\n" + PROSE.replace(", and", ",\nand") + "\n\nShe ran.\n\n"
        "Chapter 2\n\nThe Pool of Tears\n\n" + PROSE + "\n\n"
        "CHAPTER THREE\n\n" + PROSE + "\n"
    )
    # When it is parsed as text
    book = parse_book(text.encode(), "tale.txt")
    # Then each chapter line starts a chapter; a title under it joins the chapter title
    assert book.title == "The Tale"
    assert [c.title for c in book.chapters] == [
        "CHAPTER I: Down the Rabbit-Hole", "Chapter 2: The Pool of Tears", "CHAPTER THREE"]
    first = book.chapters[0]
    # And hard-wrapped lines are joined, headings come first, the short preface is not a chapter
    assert first.paragraphs == ("CHAPTER I.", "Down the Rabbit-Hole", PROSE, "She ran.")
    assert first.headings == (0, 1)
    assert book.chapters[2].paragraphs == ("CHAPTER THREE", PROSE)


def test_unwrapped_lines_are_paragraphs_and_wrapped_lines_are_joined() -> None:
    # Given a block of long unwrapped lines (one paragraph per line) and a hard-wrapped block
    unwrapped = f"{PROSE} One.\n“Yes,” he said.\n{PROSE} Two."
    wrapped = PROSE.replace(", and", ",\nand")
    # When it is parsed
    paragraphs = parse_book(f"{unwrapped}\n\n{wrapped}".encode(), "x.txt").chapters[0].paragraphs
    # Then each long line is its own paragraph, and the wrapped lines form one
    assert paragraphs == (f"{PROSE} One.", "“Yes,” he said.", f"{PROSE} Two.", PROSE)


def test_prose_that_starts_with_chapter_words_is_not_a_heading() -> None:
    # Given paragraphs that begin like chapter lines but are ordinary sentences
    text = (f"{PROSE}\n\nPart did not survive the fire, and\nthe rest was lost in the long winter that\n"
            f"followed the siege of the town.\n\nBook two of the series\nwas better, everyone said.")
    # Then the text is one chapter with three paragraphs
    book = parse_book(text.encode(), None, "text", title="Given")
    assert len(book.chapters) == 1
    assert book.chapters[0].title == "Given" and len(book.chapters[0].paragraphs) == 3
    assert book.chapters[0].headings == ()


def test_table_of_contents_block_and_gutenberg_boilerplate_are_dropped() -> None:
    # Given a Project Gutenberg text: header, a contents block, two chapters, licence
    text = (
        "The Project Gutenberg eBook of A Tale\n\nThis ebook is for the use of anyone anywhere.\n\n"
        "*** START OF THE PROJECT GUTENBERG EBOOK A TALE ***\n\nContents\n\n"
        " CHAPTER I.     The Start\n CHAPTER II.    The End\n\n"
        f"CHAPTER I.\nThe Start\n\n{PROSE}\n\nCHAPTER II.\nThe End\n\n{PROSE}\n\n"
        "*** END OF THE PROJECT GUTENBERG EBOOK A TALE ***\n\nSection 1. General Terms of Use " * 1
    )
    # When it is parsed
    book = parse_book(text.encode())
    # Then only the two chapters remain, with nothing of the boilerplate
    assert [c.title for c in book.chapters] == ["CHAPTER I: The Start", "CHAPTER II: The End"]
    assert "Gutenberg" not in " ".join(p for c in book.chapters for p in c.paragraphs)


def test_split_pattern_from_the_caller() -> None:
    # Given a text whose chapters are marked "~ 1 ~" and a pattern for them
    text = f"~ 1 ~\n{PROSE}\n\n~ 2 ~\n\n{PROSE}\nStill chapter two.\n"
    # When it is parsed with that pattern
    book = parse_book(text.encode(), "x.txt", split_pattern=r"^~ \d+ ~$")
    # Then a matching line starts a chapter even inside a block
    assert [c.title for c in book.chapters] == ["~ 1 ~", "~ 2 ~"]
    assert book.chapters[1].paragraphs == ("~ 2 ~", PROSE + " Still chapter two.")


@pytest.mark.parametrize("pattern", ["(unclosed", "^$|x", "*bad"])
def test_bad_split_pattern_is_invalid_book(pattern: str) -> None:
    # Given a pattern that does not compile or matches empty lines
    # Then the book is refused with InvalidBook
    with pytest.raises(InvalidBook, match="pattern"):
        parse_book(PROSE.encode(), "x.txt", split_pattern=pattern)


@pytest.mark.parametrize(("pattern", "reason"), [
    (r"^(\w+)\s\1$", "backreferences"), (r"^(?=Chapter)", "lookarounds"), (r"(?<!x)Part", "lookarounds"),
])
def test_split_pattern_is_re2_which_has_no_backreferences_or_lookarounds(pattern: str, reason: str) -> None:
    # Given a pattern Python's re accepts but RE2 (linear time, whatever the input) does not
    # Then it is refused with a message that says why, before any text is read
    with pytest.raises(InvalidBook, match=reason):
        compile_pattern(pattern)
    with pytest.raises(InvalidBook, match="RE2"):
        parse_book(PROSE.encode(), "x.txt", split_pattern=pattern)


def test_split_pattern_that_backtracks_for_hours_on_re_is_instant() -> None:
    # Given the pattern and the line that take hours on Python's re (nested quantifiers)
    text = "Chapter one\n\n" + "a" * 40 + "!\n\n" + PROSE
    # When it is read with that pattern (RE2, so linear)
    book = parse_book(text.encode(), "x.txt", split_pattern=r"^(\w+\s?)+$")
    # Then "Chapter one" is the one chapter line
    assert [c.title for c in book.chapters] == ["Chapter one"]


def test_lone_surrogates_and_odd_unicode_are_read_or_refused_cleanly() -> None:
    # Given text with lone surrogates (valid in a Python string, in no encoding) and odd characters
    text = f"Chapter 1\n\n{PROSE} \ud800 \udfff \ue000 \ue0007\ue001 \u2028 İ ﬁ\n\nChapter 2\n\n{PROSE}"
    # Then text and Markdown read, with every lone surrogate as U+FFFD, and all of it encodes
    for markdown in (False, True):
        book = read_plaintext(text, markdown=markdown)
        spoken = " ".join(p for c in book.chapters for p in c.paragraphs)
        assert "\ufffd \ufffd" in spoken and spoken.encode()
    assert all(b.text.encode() for b in markdown_blocks(f"# \ud800 title\n\n*{PROSE}*\ud83d"))
    # And a pattern with a lone surrogate is an invalid pattern, not a crash
    with pytest.raises(InvalidBook, match="pattern"):
        parse_book(PROSE.encode(), "x.txt", split_pattern="\ud800")


@pytest.mark.parametrize("data", [b"", b"   \n\n  \n", b"*** --- ***\n\n# \n"])
def test_text_without_prose_is_an_empty_book(data: bytes) -> None:
    # Given text with nothing to read
    # Then it is EmptyBook
    with pytest.raises(EmptyBook):
        parse_book(data, "empty.txt")


def test_binary_and_legacy_encodings() -> None:
    # Given binary bytes, and Windows-1252 text with curly quotes
    with pytest.raises(InvalidBook, match="binary"):
        parse_book(b"\x00\x01\x02binary", "x.txt")
    book = parse_book(("\u201cCaf\u00e9,\u201d " + PROSE).encode("cp1252"), "x.txt")
    # Then binary is refused and Windows-1252 is decoded
    assert book.chapters[0].paragraphs[0].startswith("\u201cCaf\u00e9,\u201d")


def test_markdown_headings_and_markup() -> None:
    # Given Markdown with front matter, a book-title H1, chapters at H2 and a scene at H3
    text = (
        "---\ntitle: Front Title\n---\n# The Book\n\n"
        "## Chapter One\n\nSome *emphasis*, **strong**, `code`, a [link](http://x.org) and "
        "![a map](m.png) here.[^1]\n\n```python\nprint('never read')\n```\n\n"
        "- first item\n- second item\n\n> a quote\n> goes on\n\n"
        "[^1]: A footnote.\n[ref]: http://example.com\n\n"
        "Chapter Two\n-----------\n\n### A Scene\n\nsnake_case_name stays, \\*stars\\* too, &amp; entities.\n"
    )
    # When it is parsed as Markdown (from the suffix)
    book = parse_book(text.encode(), "book.md")
    # Then chapters come from the repeated level, the lone H1 is not a chapter, markup is gone
    assert book.title == "Front Title"
    assert [c.title for c in book.chapters] == ["Chapter One", "Chapter Two: A Scene"]
    one, two = book.chapters
    assert one.paragraphs == ("Chapter One", "Some emphasis, strong, code, a link and here.",
                              "first item", "second item", "a quote goes on")
    assert two.paragraphs == ("Chapter Two", "A Scene", "snake_case_name stays, *stars* too, & entities.")
    assert two.headings == (0, 1)


def test_markdown_without_headings_uses_chapter_lines() -> None:
    # Given Markdown with no '#' headings, only "Chapter N" lines
    text = f"Chapter 1\n\n{PROSE}\n\nChapter 2\n\n{PROSE}\n"
    # Then the chapter lines split it
    book = parse_book(text.encode(), None, "markdown")
    assert [c.title for c in book.chapters] == ["Chapter 1", "Chapter 2"]


def test_part_headings_carry_into_the_next_chapter() -> None:
    # Given parts (H1) holding more chapters (H2) than there are parts
    text = (f"# Part One\n\n## Chapter 1\n\n{PROSE}\n\n## Chapter 2\n\n{PROSE}\n\n"
            f"# Part Two\n\n## Chapter 3\n\n{PROSE}\n")
    book = parse_book(text.encode(), "x.md")
    # Then chapters are the H2s, and a part title is read at the start of the next chapter
    assert [c.title for c in book.chapters] == ["Chapter 1", "Chapter 2", "Chapter 3"]
    assert book.chapters[0].paragraphs[:3] == ("Part One", "Chapter 1", PROSE)
    assert book.chapters[2].paragraphs[:3] == ("Part Two", "Chapter 3", PROSE)
    assert book.chapters[2].headings == (0, 1)


def test_one_subtitle_per_chapter_does_not_become_the_chapter_level() -> None:
    # Given chapters (H2) each with one subtitle (H3) right under the heading
    text = f"## Chapter 1\n### The Start\n\n{PROSE}\n\n## Chapter 2\n### The End\n\n{PROSE}\n"
    # Then chapters stay at H2, titled with their subtitles
    book = parse_book(text.encode(), "x.md")
    assert [c.title for c in book.chapters] == ["Chapter 1: The Start", "Chapter 2: The End"]


def test_strip_inline_keeps_text_as_written() -> None:
    # Given inline markup of each kind
    # Then only the markup goes
    assert strip_inline("a_b_c and 2 * 3 * 4") == "a_b_c and 2 * 3 * 4"
    assert strip_inline("<em>x</em> <br/> y") == "x y"
    assert strip_inline("[text][ref] and <https://x.org>") == "text and"


@pytest.mark.parametrize(("markdown", "spoken"), [
    ("**strong** and __also__, *em* and _em_, ~~gone~~", "strong and also, em and em, gone"),
    ("***both*** and **a *nested* one**", "both and a nested one"),
    ("snake_case_name, 2*3*4 and * loose * stars", "snake_case_name, 2*3*4 and * loose * stars"),
    ("``code with ` inside`` and `x`", "code with ` inside and x"),
    ("an unclosed `tick and [bracket and ![image", "an unclosed `tick and [bracket and ![image"),
    ("[a [nested] link](u) ![alt](i.png) [^1] <mailto:x@y.z> done", "[a [nested] link](u) done"),
    ("[a](b [c](d) e]", "a e]"),
    ("<!-- hidden --> shown <!-- open", "shown <!-- open"),
])
def test_inline_markup_on_odd_but_valid_input(markdown: str, spoken: str) -> None:
    # Given inline markup nested, unclosed or mixed
    # Then it is stripped as before (the rules are now linear scans, not lazy regexes)
    assert " ".join(b.text for b in markdown_blocks(markdown)) == spoken


def test_front_matter_headings_and_tables_read_as_before() -> None:
    # Given front matter with a blank line, an ATX heading with a closing run, a table with a rule
    text = ("---\n\ntitle:  My *Book*  \nauthor: x\n...\n# Chapter One ##\n\n"
            f"| a | b |\n|:--|--:|\n| 1 | 2 |\n\n{PROSE}\n\n# Chapter#Two\n\n{PROSE}\n")
    book = parse_book(text.encode(), "x.md")
    # Then the title comes from the front matter, the headings lose their markers, the rule goes
    assert book.title == "My Book"
    assert [c.title for c in book.chapters] == ["Chapter One", "Chapter#Two"]
    assert book.chapters[0].paragraphs[:3] == ("Chapter One", "a, b", "1, 2")


def test_detect_format() -> None:
    # Given the caller's format, zip magic, and file suffixes
    # Then the format is chosen in that order; an unknown format is InvalidRequest
    assert detect_format(b"PK\x03\x04...", "x.txt", None) == "epub"
    assert detect_format(b"# x", "x.MD", None) == "markdown"
    assert detect_format(b"# x", "x.md", "text") == "text"
    assert detect_format(b"x", None, None) == "text"
    with pytest.raises(InvalidRequest):
        detect_format(b"x", None, "pdf")


def _book(chapters: int) -> Book:
    return Book("B", tuple(Chapter(n, f"C{n}", ("p",)) for n in range(1, chapters + 1)))


@pytest.mark.parametrize(
    ("spec", "numbers"),
    [(None, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]), ("  ", list(range(1, 11))), ("2-5", [2, 3, 4, 5]),
     ("1,3,7-9", [1, 3, 7, 8, 9]), ("9-10, 1", [1, 9, 10]), ("4", [4]), ("3-3,3", [3])],
)
def test_select_chapters(spec: str | None, numbers: list[int]) -> None:
    # Given a ten-chapter book and a range
    # Then the named chapters come back in book order, once each
    assert [c.number for c in select_chapters(_book(10), spec)] == numbers


@pytest.mark.parametrize("spec", ["0", "11", "5-2", "2-", "a", "1,,2", "1;2", "-3", "9-12", "1.5"])
def test_select_chapters_rejects_unknown_or_malformed(spec: str) -> None:
    # Given a range outside 1-10 or malformed
    # Then UnknownChapters
    with pytest.raises(UnknownChapters):
        select_chapters(_book(10), spec)


def test_japanese_chapters_start_at_dai_n_sho_and_each_line_is_a_paragraph() -> None:
    # Given a Japanese text: 第N章 headings with titles, short lines that are paragraphs
    text = "第一章 雨の朝\n\n今日は雨だった。\n\n窓の外は静かだった。\n鳥が鳴いた。\n\n第2話\n\n晴れた。\n"
    book = parse_book(text.encode(), "ja.txt")
    # Then each heading starts a chapter (its title kept, no sentence taken for a subtitle)
    assert [c.title for c in book.chapters] == ["第一章 雨の朝", "第2話"]
    # And each line is its own paragraph (a line break ends a sentence), never joined with a space
    assert book.chapters[0].paragraphs[1:] == ("今日は雨だった。", "窓の外は静かだった。", "鳥が鳴いた。")
