"""A read-along EPUB made of the source EPUB's own documents, built in process (the library
of ``tests/support/library.py``: synthetic sentence audio, the real assembler and builder) from a
hostile EPUB 3:

- its documents, styles, images, cover and navigation are the source's, each spoken sentence and
  word wrapped in a ``<span id>`` that its document's overlay points at, with the captions' cues
  as clips; text that was not spoken (a footnote) has no ``<par>``;
- a chapter that was not rendered is left out, and so are the navigation's links to it;
- the allowlist removed every script, frame, form, handler and remote or ``javascript:`` URL, and
  EPUBCheck finds nothing to report;
- a file ships only when its bytes are of its declared type, under a name of ours, and nothing
  links to one that does not ship or to one of another kind;
- text that is never read aloud counts against the book's character limit;
- a source that no longer gives the rendered chapters falls back to generated XHTML.

The allowlist's rules one by one are in ``tests/unit/books/test_sanitize.py``; the real voice's EPUB source,
through the service, in ``tests/service/test_books.py``.
"""

from __future__ import annotations

import io
import posixpath
import re
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from xml.etree import ElementTree

import pytest
from lxml import etree
from sqlalchemy import update

from tests.support import epubcheck, migrate, wiring_of
from tests.support.library import Library, Sentence, builder, speech
from tts_queue.books.readalong.job import BookIdentity, SourceJob, write_source
from tts_queue.books.readalong.overlay import clock, parse_vtt
from tts_queue.books.readalong.spans import mark
from tts_queue.books.readalong.textmarks import Aligner, FlatText, Mark, letters, roman
from tts_queue.books.sources.chapter import BookLimits
from tts_queue.books.sources.parse import parse_book
from tts_queue.books.sources.segment import segment_chapter
from tts_queue.enums import BookStatus
from tts_queue.errors import BookTooLarge
from tts_queue.settings import Settings
from tts_queue.tables import BookRow, ChapterRow

X = "{http://www.w3.org/1999/xhtml}"
OPF = "{http://www.idpf.org/2007/opf}"
SMIL = "{http://www.w3.org/ns/SMIL}"
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d49444154789c6360000002000100e221bc330000000049454e44ae426082")
OPF_TEXT = """<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="uid">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="uid">urn:uuid:1</dc:identifier>
<dc:title>Hostile Tales</dc:title><dc:language>en</dc:language><dc:creator>A. Writer</dc:creator>
<meta property="dcterms:modified">2026-01-01T00:00:00Z</meta></metadata>
<manifest>
<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
<item id="css" href="css/style.css" media-type="text/css"/>
<item id="pic" href="images/pic.png" media-type="image/png"/>
<item id="cover" href="images/cover.svg" media-type="image/svg+xml" properties="cover-image"/>
<item id="js" href="js/evil.js" media-type="application/javascript"/>
<item id="c1" href="text/one.xhtml" media-type="application/xhtml+xml" properties="scripted svg"/>
<item id="c2" href="text/two.xhtml" media-type="application/xhtml+xml"/>
<item id="c3" href="text/three.xhtml" media-type="application/xhtml+xml"/>
</manifest>
<spine><itemref idref="c1"/><itemref idref="c2"/><itemref idref="c3"/></spine>
</package>"""
NAV = """<?xml version="1.0" encoding="UTF-8"?>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><head><title>Contents</title>
</head><body><nav epub:type="toc"><ol><li><a href="text/one.xhtml">The First Part</a></li>
<li><a href="text/two.xhtml">The Second Part</a></li><li><a href="text/three.xhtml">The Third Part</a></li>
</ol></nav></body></html>"""
CSS = """@import url(http://evil.example/x.css);
@import "javascript:alert(1)";
body { color: #222; background: url(javascript:alert(1)); }
p.pic { background-image: url(../images/pic.png); }
h1 { behavior: url(evil.htc); font-weight: bold; }
"""
COVER = """<svg xmlns="http://www.w3.org/2000/svg" version="1.1" viewBox="0 0 10 10" onload="alert(1)">
<script>alert(1)</script><rect width="10" height="10" fill="navy"/></svg>"""


def document(title: str, body: str) -> str:
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml" '
            'xmlns:epub="http://www.idpf.org/2007/ops" xml:lang="en" lang="en"><head>'
            f'<title>{title}</title><link rel="stylesheet" type="text/css" href="../css/style.css"/>'
            f'<script>alert(1)</script></head><body>{body}</body></html>')


ONE = document("The First Part", """
<section epub:type="chapter" id="one"><h1>The First Part</h1>
<p onclick="alert(1)">It was late, and the fog lay <em>thick</em> on Baker Street. Holmes waited by the
 fire.<a epub:type="noteref" href="#note1">1</a></p>
<p class="pic">He read the letter <a href="http://evil.example/">twice</a> and
 <a href="javascript:alert(1)">then a third time</a>, slowly.</p>
<iframe src="http://evil.example/"></iframe><form action="http://evil.example/"><input name="q"/></form>
<p><img src="../images/pic.png" alt="A pipe" onerror="alert(1)"/>Watson came in from the cold street.</p>
<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><foreignObject><p>hidden</p></foreignObject>
<script>alert(1)</script><circle r="4" cx="5" cy="5"/></svg>
<aside epub:type="footnote" id="note1"><p>A footnote that is never read aloud at all.</p></aside>
</section>""")
TWO = document("The Second Part", """
<section epub:type="chapter"><h1>The Second Part</h1><h2>IV</h2>
<p>The morning came grey and wet over the roofs. Nobody knocked at the door that day.</p>
<p>“Nothing?” asked Watson. “Nothing at all,” said Holmes, and he lit his pipe.</p></section>""")
THREE = document("The Third Part", """
<section epub:type="chapter"><h1>The Third Part</h1>
<p>This part is never rendered, so it is not in the read-along book at all, not even its text. Its
 words are here only to make it a chapter of its own.</p></section>""")


def packed(files: dict[str, str | bytes]) -> bytes:
    """An EPUB of ``files`` (their paths under ``OEBPS/``, ``content.opf`` among them)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", (
            '<?xml version="1.0"?><container version="1.0" '
            'xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
            '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>"))
        for name, content in files.items():
            archive.writestr(f"OEBPS/{name}", content)
    return buffer.getvalue()


def hostile_epub(two: str = TWO, opf: str = OPF_TEXT, two_name: str = "text/two.xhtml") -> bytes:
    return packed({"content.opf": opf, "nav.xhtml": NAV, "css/style.css": CSS, "images/cover.svg": COVER,
                   "js/evil.js": "alert(1)", "text/one.xhtml": ONE, two_name: two, "text/three.xhtml": THREE,
                   "images/pic.png": PNG})


@pytest.fixture
def library(tmp_path: Path) -> Library:
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path / "data")}))
    wiring = wiring_of(settings)
    return Library(wiring.db, wiring.cache, wiring.books.storage, wiring.books, wiring)


def rendered_source(library: Library, data: bytes, numbers: tuple[int, ...]) -> str:
    """A done book of chapters ``numbers`` of the EPUB ``data``, its sentences as the ingestion
    splits them (synthetic audio, word timings for most), the EPUB kept as its source."""
    chapters = [c for c in parse_book(data).chapters if c.number in numbers]
    sentences = [[Sentence(s.text, s.pause_after, speech(s.index_in_chapter, 0.4 + 0.02 * len(s.text)),
                           aligned=s.index_in_chapter % 4 != 3)
                  for s in segment_chapter(c)] for c in chapters]
    book_id = library.add_book(sentences, "mp3")
    library.storage.put(f"uploads/{book_id}", data, "application/epub+zip")
    with library.db.write() as session:
        session.execute(update(BookRow).where(BookRow.id == book_id).values(
            source={"upload": f"uploads/{book_id}", "input_format": "epub", "filename": "hostile.epub"}))
        for position, chapter in enumerate(chapters, start=1):  # the rows carry the source's numbers
            session.execute(update(ChapterRow).where(ChapterRow.book_id == book_id,
                                                     ChapterRow.number == position)
                            .values(title=chapter.title))
    for number in range(1, len(chapters) + 1):
        assert library.assembler().assemble(book_id, number) is BookStatus.DONE
    return book_id


def test_a_source_epubs_own_documents_carry_the_overlays_and_nothing_hostile(library: Library,
                                                                              tmp_path: Path) -> None:
    # Given a done book of the first two chapters of a hostile EPUB 3, the EPUB kept as its source
    data = hostile_epub()
    book_id = rendered_source(library, data, (1, 2))
    # When its read-along EPUB is built
    path = tmp_path / "readalong.epub"
    path.write_bytes(library.storage.read(builder(library).build(book_id)))
    with zipfile.ZipFile(path) as epub:
        names = set(epub.namelist())
        opf = ElementTree.fromstring(epub.read("OEBPS/package.opf"))
        items = {str(i.get("href")): i for i in opf.iter(f"{OPF}item")}
        ids = {i.get("id"): str(i.get("href")) for i in opf.iter(f"{OPF}item")}
        spine = [ids[i.get("idref")] for i in opf.iter(f"{OPF}itemref")]
        by_type = {(i.get("media-type"), i.get("properties")): href for href, i in items.items()
                   if not href.startswith("readalong/")}
        # Then the source's two rendered documents, style, image, cover and navigation are in it,
        # each under a name of ours with the extension of what it is, and what was not rendered or
        # is not allowed is not
        assert len(spine) == 2 and all(re.fullmatch(r"text/\d{4}\.xhtml", href) for href in spine)
        nav_name = by_type[("application/xhtml+xml", "nav")]
        cover_name = by_type[("image/svg+xml", "cover-image")]
        css_name, png_name = by_type[("text/css", None)], by_type[("image/png", None)]
        assert re.fullmatch(r"styles/\d{4}\.css", css_name) and re.fullmatch(r"images/\d{4}\.png", png_name)
        assert re.fullmatch(r"images/\d{4}\.svg", cover_name) and re.fullmatch(r"text/\d{4}\.xhtml", nav_name)
        ours = {href for href in items if href.startswith("readalong/")}
        assert len(items) == len(ours) + 6  # the three documents, the style, the image and the cover
        ours_or_named = r"OEBPS/(readalong/.*|(text|styles|images)/\d{4}\.(xhtml|css|png|svg)|package\.opf)"
        assert not [n for n in names if n.startswith("OEBPS/") and not re.fullmatch(ours_or_named, n)]
        nav = epub.read(f"OEBPS/{nav_name}").decode()
        assert [href.split("#")[0] for href in re.findall(r'href="([^"]+)"', nav)] == [
            posixpath.relpath(name, posixpath.dirname(nav_name)) for name in spine]
        # And every spoken sentence's words are wrapped where they are written, with the
        # captions' cues as their clips, in order
        for number, href in enumerate(spine, start=1):
            overlay = items[href].get("media-overlay")
            smil_href = ids[overlay]
            xhtml = ElementTree.fromstring(epub.read(f"OEBPS/{href}"))
            by_id = {e.get("id"): " ".join("".join(e.itertext()).split())
                     for e in xhtml.iter() if e.get("id")}
            smil = ElementTree.fromstring(epub.read(f"OEBPS/{smil_href}"))
            pars = [(p.find(f"{SMIL}text").get("src").split("#")[1],  # type: ignore[union-attr]
                     p.find(f"{SMIL}audio")) for p in smil.iter(f"{SMIL}par")]
            chapter_row = library.books.chapters(book_id)[number - 1]
            files = library.assembler().files(chapter_row, "mp3")
            assert files is not None
            cues = [(clock(round(c.start_s * 1000)), clock(round(c.end_s * 1000)), c.text)
                    for c in parse_vtt(library.storage.read(files.vtt).decode().splitlines())]
            clips = [(a.get("clipBegin"), a.get("clipEnd"), by_id[ref]) for ref, a in pars]  # type: ignore[union-attr]
            assert len(clips) == len(cues)  # every sentence marked, the heading "IV" (read "4") too
            at = 0
            for begin, end, shown in clips:  # each clip a cue, in order, its text the cue's
                while cues[at][:2] != (begin, end):
                    at += 1
                said = cues[at][2]
                said = roman(int(said)) if said.isdigit() else said  # a heading read as a number
                assert re.sub(r"\W", "", shown) == re.sub(r"\W", "", said), (shown, said)
            assert all(f"audio/chapter-{number:03d}.mp3" in (a.get("src") or "") for _, a in pars)  # type: ignore[union-attr]
        # And the footnote is kept as text, with no mark
        one = epub.read(f"OEBPS/{spine[0]}").decode()
        assert "A footnote that is never read aloud" in one
        note = re.search(r"<p>A footnote[^<]*</p>", one)
        assert note is not None
        # And nothing hostile is left in any document, style sheet or image
        for name in names:
            if not name.endswith((".xhtml", ".css", ".svg")):
                continue
            text = epub.read(name).decode()
            assert not re.search(r"<(script|iframe|form|input|foreignObject)\b", text), name
            assert not re.search(r"\son\w+=", text), name
            assert "javascript:" not in text and "evil.example" not in text and "behavior" not in text, name
        assert f"url(../{png_name})" in epub.read(f"OEBPS/{css_name}").decode()
    # And EPUBCheck finds nothing to report
    assert epubcheck(path) == []


@pytest.mark.parametrize("change", ["title", "malformed"])
def test_a_source_that_cannot_be_reused_falls_back_to_generated_text(library: Library, tmp_path: Path,
                                                                      change: str) -> None:
    # Given a done book whose kept source's chapter titles differ from its rows (read by an
    # earlier parser, say), or one of whose documents is not well-formed XML (the lenient parser
    # of the ingestion read it)
    data = hostile_epub(TWO.replace("that day.</p>", "that day.<br>", 1) if change == "malformed" else TWO)
    book_id = rendered_source(library, data, (1, 2))
    if change == "title":
        with library.db.write() as session:
            session.execute(update(ChapterRow).where(ChapterRow.book_id == book_id, ChapterRow.number == 1)
                            .values(title="Another Title"))
    # When its read-along EPUB is built
    path = tmp_path / "fallback.epub"
    path.write_bytes(library.storage.read(builder(library).build(book_id)))
    # Then its text is generated from the sentences, as for a book without a source, and is whole
    with zipfile.ZipFile(path) as epub:
        assert epub.testzip() is None
        names = set(epub.namelist())
        assert {"OEBPS/chapter-001.xhtml", "OEBPS/chapter-002.xhtml", "OEBPS/package.opf"} <= names
        assert "OEBPS/text/one.xhtml" not in epub.namelist()
        text = "".join(ElementTree.fromstring(epub.read("OEBPS/chapter-002.xhtml")).itertext())
        assert "Nobody knocked at the door that day." in text


def test_documents_named_by_an_escaped_href_or_a_second_manifest_entry_are_marked(library: Library,
                                                                                   tmp_path: Path) -> None:
    # Given a done book of an EPUB whose second document's href is percent-escaped (a space and a
    # "%41" in its file name, which must not be read as "A") and whose spine names the first by a
    # second manifest entry of the same file
    opf = (OPF_TEXT.replace('href="text/two.xhtml"', 'href="text/part%2541%20two.xhtml"')
           .replace('<item id="c2"', '<item id="c1again" href="text/one.xhtml" '
                    'media-type="application/xhtml+xml" properties="scripted svg"/>\n<item id="c2"')
           .replace('<itemref idref="c1"/>', '<itemref idref="c1again"/>'))
    data = hostile_epub(opf=opf, two_name="text/part%41 two.xhtml")
    book_id = rendered_source(library, data, (1, 2))
    # When its read-along EPUB is built
    path = tmp_path / "escaped.epub"
    path.write_bytes(library.storage.read(builder(library).build(book_id)))
    # Then both documents are its own (not the generated text), each with its sentences marked
    # and an overlay
    with zipfile.ZipFile(path) as epub:
        opf_root = ElementTree.fromstring(epub.read("OEBPS/package.opf"))
        items = {str(i.get("href")): i for i in opf_root.iter(f"{OPF}item")}
        ids = {i.get("id"): str(i.get("href")) for i in opf_root.iter(f"{OPF}item")}
        spine = [ids[i.get("idref")] for i in opf_root.iter(f"{OPF}itemref")]
        assert "chapter-001.xhtml" not in items and len(spine) == 2
        for number, href in enumerate(spine, start=1):
            assert items[href].get("media-overlay"), href
            assert re.search(rf'id="ra-c{number}s1"', epub.read(f"OEBPS/{href}").decode()), href


def found_marks(root: etree._Element, sentences: list[str]) -> list[Mark]:
    """A mark ``s{n}`` for each sentence, found one after another in the document ``root``."""
    aligner = Aligner([FlatText(root).letters])
    marks = []
    for n, sentence in enumerate(sentences):
        found = aligner.find([0], sentence)
        assert found is not None, sentence
        marks.append(Mark(0, f"s{n}", found[1], found[1] + len(letters(sentence))))
    return marks


@pytest.mark.parametrize("base", ["漢", "<rb>漢</rb>"])
def test_a_sentence_that_starts_or_ends_with_a_ruby_is_marked_whole(base: str) -> None:
    # Given Japanese sentences that begin and end with a word and its reading
    body = (f"<p><ruby>{base}<rt>かん</rt></ruby>字を書く。<ruby>明日<rp>(</rp><rt>あした</rt><rp>)</rp>"
            "</ruby>も書く。毎日書く<ruby>練習<rt>れんしゅう</rt></ruby></p>")
    root = etree.fromstring(document("t", body).encode())
    before = etree.tostring(root, method="text", encoding="unicode")
    sentences = ["漢字を書く。", "明日も書く。", "毎日書く練習"]
    # When each is marked
    placed = mark(root, found_marks(root, sentences))
    # Then each span holds its whole sentence with the rubies in it, whole and in place
    assert etree.tostring(root, method="text", encoding="unicode") == before
    assert placed == {"s0", "s1", "s2"}
    for n, sentence in enumerate(sentences):
        [span] = [e for e in root.iter(f"{X}span") if e.get("id") == f"s{n}"]
        unread = "ancestor::*[local-name()='rt' or local-name()='rp']"
        read = "".join(str(t) for t in span.xpath(f".//text()[not({unread})]"))
        assert read == sentence
    assert len(root.findall(f".//{X}ruby")) == 3 and len(root.findall(f".//{X}rt")) == 3


def test_an_epub2_cover_named_in_its_metadata_is_the_cover_image(tmp_path: Path) -> None:
    # Given an EPUB 2 whose cover picture is named only by <meta name="cover" content="ID"/>
    from ebooklib import epub

    from tts_queue.books.readalong.shipment import plan

    data = packed({
        "content.opf": (
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="2.0" '
            'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/" '
            'xmlns:opf="http://www.idpf.org/2007/opf"><dc:title>T</dc:title><dc:identifier id="id">x'
            '</dc:identifier><dc:language>en</dc:language><meta name="cover" content="front"/></metadata>'
            '<manifest><item id="front" href="front.png" media-type="image/png"/><item id="pic" '
            'href="pic.png" media-type="image/png"/><item id="a" href="a.xhtml" '
            'media-type="application/xhtml+xml"/></manifest><spine><itemref idref="a"/></spine></package>'),
        "front.png": PNG, "pic.png": PNG, "a.xhtml": document("A", "<p>Hi.</p>")})
    path = tmp_path / "two.epub"
    path.write_bytes(data)
    # When its items are planned for the read-along EPUB
    items = plan(epub.read_epub(str(path), options={"ignore_ncx": True}), set()).items
    # Then that picture, and only it, is the cover image
    assert {item.path: item.cover for item in items if item.media_type == "image/png"} == {
        "front.png": True, "pic.png": False}


def test_marks_keep_the_text_and_split_an_inline_element_a_sentence_ends_in() -> None:
    # Given a paragraph whose second sentence ends inside an <em> that the third goes on in, a
    # footnote marker, and a line break
    body = ('<p>“I think, <em>Watson. That</em> you have.”<sup>2</sup> Yes.<br/>'
            "<strong>Quite <em>so</em></strong>, he said.</p>")
    root = etree.fromstring(document("t", body).encode())
    before = "".join(root.itertext())
    sentences = ["“I think, Watson.", "That you have.”", "Yes.", "Quite so, he said."]
    # When each sentence is marked
    placed = mark(root, found_marks(root, sentences))
    # Then the text is unchanged, each id is there once, and each span holds its whole sentence
    assert "".join(root.itertext()) == before
    spans = {e.get("id"): " ".join("".join(e.itertext()).split()) for e in root.iter(f"{X}span")}
    assert placed == set(spans) == {"s0", "s1", "s2", "s3"}
    assert [spans[f"s{n}"] for n in range(4)] == sentences
    assert len(root.findall(f".//{X}em")) == 3  # the <em> split in two where the sentence ends


SCRIPT_PAGE = document("Evil", "<script>alert(1)</script><p onclick='alert(1)'>Click.</p>")
ONLOAD_SVG = '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><rect width="1" height="1"/></svg>'
WOFF = b"wOFF" + bytes(60)
SHIPPING_OPF = """<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="uid">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier id="uid">urn:uuid:2</dc:identifier>
<dc:title>Shipping</dc:title><dc:language>en</dc:language></metadata>
<manifest>
<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
<item id="c1" href="text/one.xhtml" media-type="application/xhtml+xml"/>
<item id="notes" href="text/notes.xhtml" media-type="application/xhtml+xml"/>
<item id="evil" href="evil.xhtml" media-type="image/png"/>
<item id="fake-font" href="fonts/f.woff" media-type="font/woff"/>
<item id="font" href="fonts/good.woff" media-type="font/woff"/>
<item id="onload" href="images/onload.png" media-type="image/png"/>
<item id="css-png" href="css/style.png" media-type="image/png"/>
<item id="css" href="css/ok.css" media-type="text/css"/>
<item id="pic" href="images/pic.png" media-type="image/png"/>
</manifest>
<spine><itemref idref="c1"/><itemref idref="notes" linear="no"/></spine>
</package>"""
SHIPPING_NAV = """<?xml version="1.0" encoding="UTF-8"?>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops"><head><title>Contents</title>
</head><body><nav epub:type="toc"><ol><li><a href="text/one.xhtml">The First Part</a></li>
<li><a href="evil.xhtml">Read this</a></li></ol></nav></body></html>"""
SHIPPING_ONE = document("The First Part", """<h1>The First Part</h1>
<p>It was late, and the fog lay thick on Baker Street while Holmes waited by the fire for a visitor who
 never came, and Watson read the evening paper twice.</p>
<p><a href="../evil.xhtml">a page</a><img src="../evil.xhtml" alt="a"/>
<img src="../images/onload.png" alt="b"/><img src="../images/pic.png" alt="c"/>
<img src="data:image/png;base64,PHNjcmlwdD4=" alt="d"/></p>""").replace(
    '<link rel="stylesheet" type="text/css" href="../css/style.css"/>',
    '<link rel="stylesheet" href="../css/style.png"/><link rel="stylesheet" href="../css/ok.css"/>')
SHIPPING_CSS = ("@font-face { font-family: A; src: url(../fonts/f.woff) }\n"
                "@font-face { font-family: B; src: url(../fonts/good.woff) }\n"
                "p { background: url(../images/pic.png) }")


def shipping_job(tmp_path: Path, notes: str, limits: BookLimits | None = None) -> SourceJob:
    """A job over a source of one chapter with files declared as what they are not, and a document
    of ``notes`` outside the reading order."""
    data = packed({"content.opf": SHIPPING_OPF, "nav.xhtml": SHIPPING_NAV, "text/one.xhtml": SHIPPING_ONE,
                   "text/notes.xhtml": document("Notes", f"<p>{notes}</p>"), "evil.xhtml": SCRIPT_PAGE,
                   "fonts/f.woff": SCRIPT_PAGE, "fonts/good.woff": WOFF, "images/onload.png": ONLOAD_SVG,
                   "css/style.png": "body { background: url(http://evil.example/x.png) }",
                   "css/ok.css": SHIPPING_CSS, "images/pic.png": PNG})
    upload = tmp_path / "upload.epub"
    upload.write_bytes(data)
    title = parse_book(data).chapters[0].title
    return SourceJob(str(upload), str(tmp_path / "book.epub"), BookIdentity("b2", "Shipping", None),
                     ((1, title),), "en", "a voice", datetime(2026, 12, 6, tzinfo=timezone.utc), (), limits)


def test_only_files_of_their_declared_type_ship_under_names_of_ours(tmp_path: Path) -> None:
    # Given a source whose script page, HTML and SVG are declared as a PNG image or a font, whose
    # style sheet is declared as a PNG, linked from its chapter and its table of contents
    job = shipping_job(tmp_path, "Notes.")
    # When its read-along part is written
    write_source(job)
    with zipfile.ZipFile(job.epub) as epub:
        opf = ElementTree.fromstring(epub.read("OEBPS/package.opf"))
        items = {str(i.get("href")): str(i.get("media-type")) for i in opf.iter(f"{OPF}item")}
        shipped = {name: epub.read(name) for name in epub.namelist() if not name.endswith("/")}
    # Then only the real PNG, the real font and the style sheet ship besides the documents, each
    # under a name of ours with its own extension
    theirs = {href: kind for href, kind in items.items() if not href.startswith("readalong/")}
    assert sorted(theirs.values()) == ["application/xhtml+xml"] * 3 + ["font/woff", "image/png", "text/css"]
    assert all(re.fullmatch(r"(text|styles|images|fonts)/\d{4}\.(xhtml|css|png|woff)", h) for h in theirs)
    # And nothing that runs is in any file, nor any link to what does not ship
    for name, content in shipped.items():
        assert b"<script" not in content and b"onload" not in content and b"alert" not in content, name
        assert b"evil" not in content and b"onclick" not in content, name
    [one] = [href for href, kind in theirs.items() if kind == "application/xhtml+xml"
             and b"Baker Street" in shipped[f"OEBPS/{href}"]]
    [png] = [href for href, kind in theirs.items() if kind == "image/png"]
    [font] = [href for href, kind in theirs.items() if kind.startswith("font/")]
    [css] = [href for href, kind in theirs.items() if kind == "text/css"]
    chapter = etree.fromstring(shipped[f"OEBPS/{one}"])
    assert [e.get("src") for e in chapter.iter(f"{X}img")] == [f"../{png}"]
    assert [e.get("href") for e in chapter.iter(f"{X}link")] == [f"../{css}"]
    assert [e.get("href") for e in chapter.iter(f"{X}a")] == [None]  # the link's text stays
    assert shipped[f"OEBPS/{font}"] == WOFF and shipped[f"OEBPS/{png}"] == PNG
    style = shipped[f"OEBPS/{css}"].decode()
    assert f"url(../{font})" in style and f"url(../{png})" in style and "f.woff" not in style
    [nav] = [shipped[f"OEBPS/{href}"] for href in theirs if b"<nav" in shipped[f"OEBPS/{href}"]]
    assert nav.count(b"<li>") == 1 and b"Read this" not in nav


def test_text_never_read_aloud_counts_against_the_character_limit(tmp_path: Path) -> None:
    # Given a source whose one chapter is short, with 30,000 characters of notes outside the
    # reading order (never parsed for speech, shipped in the read-along)
    job = shipping_job(tmp_path, "note " * 6000, BookLimits(unpacked_bytes=10_000_000, chars=20_000))
    # When its read-along part is written within 20,000 characters, then the source is too large
    # to be reused (the build falls back to generated text), and within 40,000 it is written
    with pytest.raises(BookTooLarge):
        write_source(job)
    write_source(shipping_job(tmp_path, "note " * 6000, BookLimits(unpacked_bytes=10_000_000, chars=40_000)))
    with zipfile.ZipFile(job.epub) as epub:
        assert "OEBPS/package.opf" in epub.namelist()
