"""EPUB books: the real Sherlock Holmes EPUB, tiny EPUB 3 and EPUB 2 files, and broken ones."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable

import pytest
from ebooklib import epub

from tests.conftest import sherlock_epub
from tts_queue.books.sources.chapter import Book
from tts_queue.books.sources.parse import BookLimits, parse_book
from tts_queue.errors import BookTooLarge, EmptyBook, InvalidBook

STORIES = [
    "A Scandal in Bohemia", "The Redheaded League", "A Case of Identity", "The Boscombe Valley Mystery",
    "The Five Orange Pips", "The Man with the Twisted Lip", "The Adventure of the Blue Carbuncle",
    "The Adventure of the Speckled Band", "The Adventure of the Engineer’s Thumb",
    "The Adventure of the Noble Bachelor", "The Adventure of the Beryl Coronet",
    "The Adventure of the Copper Beeches",
]
PROSE = ("It was a bright cold day in April, and the clocks were striking thirteen while the "
         "travellers waited by the gate for the carriage that never came.")


@pytest.fixture(scope="module")
def sherlock() -> Book:
    sherlock = sherlock_epub()
    return parse_book(sherlock.read_bytes(), "sherlock-holmes.epub")


def test_sherlock_has_the_twelve_stories_in_order(sherlock: Book) -> None:
    # Given the Standard Ebooks EPUB (title page, imprint, 12 stories, colophon, uncopyright)
    # Then exactly the 12 stories are chapters, numbered from 1, titled from the navigation
    assert [c.title for c in sherlock.chapters] == STORIES
    assert [c.number for c in sherlock.chapters] == list(range(1, 13))
    assert sherlock.title == "The Adventures of Sherlock Holmes"
    assert sherlock.author == "Arthur Conan Doyle"


def test_sherlock_skips_front_and_back_matter(sherlock: Book) -> None:
    # Given the parsed book
    text = " ".join(p for c in sherlock.chapters for p in c.paragraphs)
    # Then nothing of the imprint, colophon or uncopyright pages is read
    assert "Standard Ebooks" not in text
    assert "Public Domain Dedication" not in text
    assert "League of Moveable Type" not in text
    # And the stories' words are all there (the EPUB says 104,582 words in all)
    assert 100_000 < sherlock.word_count < 106_000


def test_sherlock_reads_within_the_default_limits_and_not_within_small_ones() -> None:
    # Given the real EPUB and the limits the settings give by default (256 MB, 10 million characters)
    data = sherlock_epub().read_bytes()
    # Then it reads; with a 100,000-character or 1 MB limit it is refused, with a clear reason
    default = BookLimits(unpacked_bytes=256 * 1024 * 1024, chars=10_000_000)
    assert len(parse_book(data, limits=default).chapters) == 12
    with pytest.raises(BookTooLarge, match="more than 100000 characters"):
        parse_book(data, limits=BookLimits(unpacked_bytes=default.unpacked_bytes, chars=100_000))
    with pytest.raises(BookTooLarge, match="unpacks to more than 1000000 bytes"):
        parse_book(data, limits=BookLimits(unpacked_bytes=1_000_000, chars=10_000_000))


def test_sherlock_chapters_start_with_their_heading(sherlock: Book) -> None:
    # Given the first story, which has parts I, II and III
    first = sherlock.chapters[0]
    # Then its heading is paragraph 0, the part numbers are headings too, the prose follows
    assert first.paragraphs[0] == "A Scandal in Bohemia"
    assert first.paragraphs[1] == "1"  # "I" as a part number is read as a number, not "eye"
    assert first.headings[:2] == (0, 1) and len(first.headings) == 4
    assert first.paragraphs[2].startswith("To Sherlock Holmes she is always the woman.")
    assert all(c.paragraphs[0] == c.title and c.headings[0] == 0 for c in sherlock.chapters)


def _epub3(chapters: list[tuple[str, str | None, str]]) -> bytes:
    """An EPUB 3 written by ebooklib: (file name, nav title or None if unlisted, body) per document."""
    book = epub.EpubBook()
    book.set_identifier("tiny-1")
    book.set_title("Tiny Tales")
    book.set_language("en")
    book.add_author("A. Writer")
    items = []
    for name, title, body in chapters:
        item = epub.EpubHtml(title=title or "", file_name=name, lang="en")
        item.content = f'<html xmlns:epub="http://www.idpf.org/2007/ops"><body>{body}</body></html>'
        book.add_item(item)
        items.append(item)
    book.toc = tuple(epub.Link(name, title, f"id{i}") for i, (name, title, _) in enumerate(chapters) if title)
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *items]
    buffer = io.BytesIO()
    epub.write_epub(buffer, book)
    return buffer.getvalue()


def test_epub3_reads_chapters_and_drops_markers_notes_and_pages() -> None:
    # Given an EPUB 3 with a cover, a copyright page, and two chapters full of things not read
    chapter_one = (
        '<section epub:type="chapter"><h1>The First</h1>'
        f'<p>{PROSE}<a epub:type="noteref" href="#n1">1</a></p>'
        '<p>Before the break<span epub:type="pagebreak" id="page7" title="7">7</span> and after.</p>'
        '<script>var x = "never read";</script><style>p { color: red }</style>'
        '<figure><img src="map.png" alt="A map"/></figure>'
        '<aside epub:type="footnote" id="n1"><p>A footnote that is not read aloud.</p></aside>'
        "</section>"
    )
    data = _epub3([
        ("cover.xhtml", "Cover", '<section epub:type="cover"><img src="cover.jpg" alt="Cover"/></section>'),
        ("copyright.xhtml", "Copyright",
         f'<section epub:type="copyright-page"><p>Copyright 2024. {PROSE}</p></section>'),
        ("text/c1.xhtml", "Chapter One: The First", chapter_one),
        ("text/c2.xhtml", "Chapter Two", f"<section><h2>The Second</h2><p>{PROSE}</p></section>"),
    ])
    # When it is parsed (format sniffed from the zip magic, no file name)
    book = parse_book(data)
    # Then the two chapters remain, titled from the navigation, each heading read first
    assert [c.title for c in book.chapters] == ["Chapter One: The First", "Chapter Two"]
    first, second = book.chapters
    assert first.paragraphs == ("The First", PROSE, "Before the break and after.")
    assert first.headings == (0,)
    assert second.paragraphs == ("The Second", PROSE)
    assert book.title == "Tiny Tales" and book.author == "A. Writer"


def test_document_without_heading_reads_its_navigation_title() -> None:
    # Given a chapter whose document has no heading element
    data = _epub3([("c1.xhtml", "Prologue", f"<p>{PROSE}</p>")])
    # Then the navigation title is spoken as its heading
    chapter = parse_book(data).chapters[0]
    assert chapter.paragraphs == ("Prologue", PROSE) and chapter.headings == (0,)


def test_unlisted_document_without_heading_continues_the_chapter() -> None:
    # Given a chapter split over two files (as converters do), only the first in the navigation
    data = _epub3([
        ("c1.xhtml", "One", f"<h1>One</h1><p>{PROSE}</p>"),
        ("c1_split.xhtml", None, "<p>And it went on.</p>"),
        ("c2.xhtml", "Two", f"<h1>Two</h1><p>{PROSE}</p>"),
    ])
    # Then the second file is the rest of chapter one, not a chapter of its own
    one, two = parse_book(data).chapters
    assert one.paragraphs == ("One", PROSE, "And it went on.") and two.title == "Two"


def test_contents_page_without_semantics_is_skipped() -> None:
    # Given a plain contents page (links only) and a page titled "Copyright" with no epub:type
    contents = "".join(f'<p><a href="c{i}.xhtml">Chapter {i}: a long title</a></p>' for i in range(9))
    data = _epub3([
        ("toc.xhtml", "Contents", f"<h1>Contents</h1>{contents}"),
        ("legal.xhtml", "Copyright", f"<h1>Copyright</h1><p>{PROSE}</p>"),
        ("c1.xhtml", "One", f"<h1>One</h1><p>{PROSE}</p>"),
    ])
    # Then only the real chapter is left
    assert [c.title for c in parse_book(data).chapters] == ["One"]


def _epub2() -> bytes:
    """A hand-made EPUB 2: OPF 2.0 in OEBPS/, an NCX, a guide, and one file holding two chapters."""
    opf = """<?xml version="1.0"?>
<package xmlns="http://www.idpf.org/2007/opf" version="2.0" unique-identifier="uid">
 <metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Old Tales</dc:title>
  <dc:identifier id="uid">old-1</dc:identifier><dc:language>en</dc:language></metadata>
 <manifest>
  <item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>
  <item id="title" href="Text/title.html" media-type="application/xhtml+xml"/>
  <item id="body" href="Text/body.html" media-type="application/xhtml+xml"/>
  <item id="notes" href="Text/notes.html" media-type="application/xhtml+xml"/>
 </manifest>
 <spine toc="ncx"><itemref idref="title"/><itemref idref="body"/>
  <itemref idref="notes" linear="no"/></spine>
 <guide><reference type="title-page" title="Title" href="Text/title.html"/></guide>
</package>"""
    ncx = """<?xml version="1.0"?>
<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1"><navMap>
 <navPoint id="p1"><navLabel><text>Old Tales</text></navLabel><content src="Text/title.html"/></navPoint>
 <navPoint id="p2"><navLabel><text>I. The Mill</text></navLabel>
  <content src="Text/body.html#ch1"/></navPoint>
 <navPoint id="p3"><navLabel><text>II. The River</text></navLabel>
  <content src="Text/body.html#ch2"/></navPoint>
</navMap></ncx>"""
    title = f"<html><body><h1>Old Tales</h1><p>{PROSE} {PROSE}</p></body></html>"
    body = (
        '<html><head><title>Old Tales</title></head><body>'
        f'<h2 id="ch1">CHAPTER I. THE MILL</h2><p>{PROSE}<sup>[12]</sup></p>'
        '<p>The wheel<span class="pagenum">[Pg 5]</span> turned.</p>'
        f'<h2 id="ch2">CHAPTER II. THE RIVER</h2><p>{PROSE}</p></body></html>'
    )
    notes = f"<html><body><p>{PROSE}</p></body></html>"
    container = """<?xml version="1.0"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
 <rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>"""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip")
        archive.writestr("META-INF/container.xml", container)
        for name, text in (("content.opf", opf), ("toc.ncx", ncx), ("Text/title.html", title),
                           ("Text/body.html", body), ("Text/notes.html", notes)):
            archive.writestr(f"OEBPS/{name}", text)
    return buffer.getvalue()


def test_epub2_with_ncx_guide_and_two_chapters_in_one_file() -> None:
    # Given an EPUB 2 whose NCX enters one document at two anchors, and a guide title page
    book = parse_book(_epub2(), "old.epub")
    # Then the title page (guide) and the non-linear notes are skipped, the document is split
    assert [c.title for c in book.chapters] == ["I. The Mill", "II. The River"]
    mill, river = book.chapters
    # And page numbers and footnote markers are not read
    assert mill.paragraphs == ("CHAPTER I. THE MILL", PROSE, "The wheel turned.")
    assert river.paragraphs == ("CHAPTER II. THE RIVER", PROSE)
    assert book.title == "Old Tales"


def test_image_only_epub_is_an_empty_book() -> None:
    # Given an EPUB whose pages hold only images
    data = _epub3([(f"p{i}.xhtml", f"Plate {i}", f'<img src="p{i}.png" alt="Plate {i}"/>') for i in range(3)])
    # Then it is refused as empty
    with pytest.raises(EmptyBook):
        parse_book(data, "plates.epub")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"PK\x03\x04" + b"\x00" * 64, "corrupt zip"),
        (b"just some text that claims to be an epub", "not an EPUB"),
    ],
)
def test_corrupt_or_fake_epub_is_invalid(data: bytes, message: str) -> None:
    # Given bytes that are not a readable EPUB, declared as one
    # Then parsing raises InvalidBook with a reason
    with pytest.raises(InvalidBook, match=message):
        parse_book(data, "broken.epub", "epub")


def test_zip_that_is_not_an_epub_is_invalid() -> None:
    # Given a zip archive without META-INF/container.xml (say, a .docx)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("word/document.xml", "<w:document/>")
    # Then it is refused, and so is a zip sent as text
    with pytest.raises(InvalidBook, match="container.xml"):
        parse_book(buffer.getvalue(), "report.docx")
    with pytest.raises(InvalidBook, match="zip archive"):
        parse_book(buffer.getvalue(), None, "text")


def test_truncated_epub_is_invalid() -> None:
    # Given the first half of a valid EPUB
    data = _epub3([("c1.xhtml", "One", f"<p>{PROSE}</p>")])
    # Then it is InvalidBook, not a crash
    with pytest.raises(InvalidBook):
        parse_book(data[: len(data) // 2])


def test_drm_encrypted_epub_is_refused() -> None:
    # Given an EPUB whose encryption.xml covers a content document
    source = zipfile.ZipFile(io.BytesIO(_epub2()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for info in source.infolist():
            archive.writestr(info, source.read(info))
        archive.writestr("META-INF/encryption.xml", (
            '<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
            'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
            '<enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>'
            '<enc:CipherData><enc:CipherReference URI="OEBPS/Text/body.html"/></enc:CipherData>'
            "</enc:EncryptedData></encryption>"))
    # Then it is refused with a clear reason
    with pytest.raises(InvalidBook, match="DRM"):
        parse_book(buffer.getvalue())


def _epub2_with(name: str, change: Callable[[bytes], bytes]) -> bytes:
    """The hand-made EPUB 2 with one entry changed."""
    source = zipfile.ZipFile(io.BytesIO(_epub2()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for info in source.infolist():
            content = source.read(info)
            archive.writestr(info, change(content) if info.filename == name else content)
    return buffer.getvalue()


def test_deeply_nested_chapter_is_invalid_not_a_crash() -> None:
    # Given an EPUB whose chapter nests 5,000 divs (RecursionError, after seconds, before)
    deep = "<div>" * 5000 + f"<p>{PROSE}</p>" + "</div>" * 5000
    data = _epub2_with("OEBPS/Text/body.html", lambda body: body.replace(b"<body>", f"<body>{deep}".encode()))
    # Then it is InvalidBook, naming the nesting
    with pytest.raises(InvalidBook, match="nests elements more than 256 deep"):
        parse_book(data)


def test_manifest_items_sharing_one_file_count_every_read() -> None:
    # Given an EPUB 2 whose manifest names its body file 30 more times (ebooklib reads it each time)
    extra = "".join(f'<item id="again{i}" href="Text/body.html" media-type="application/xhtml+xml"/>'
                    for i in range(30)).encode()
    data = _epub2_with("OEBPS/content.opf", lambda opf: opf.replace(b"</manifest>", extra + b"</manifest>"))
    unpacked = sum(info.file_size for info in zipfile.ZipFile(io.BytesIO(data)).infolist())
    # Then a limit above what the archive says it unpacks to, but below what is read, refuses it
    with pytest.raises(BookTooLarge, match="the EPUB unpacks to more than"):
        parse_book(data, limits=BookLimits(unpacked_bytes=unpacked * 3, chars=1_000_000))
    enough = BookLimits(unpacked_bytes=unpacked * 30, chars=1_000_000)
    assert len(parse_book(data, limits=enough).chapters) == 2


def test_size_limit() -> None:
    # Given a book one byte over the limit
    # Then it is refused before any parsing
    with pytest.raises(BookTooLarge):
        parse_book(b"x" * 101, "big.txt", max_bytes=100)
