"""The allowlist a source EPUB's content passes before it goes into a read-along EPUB, rule by rule:

- XHTML: what runs, embeds or submits goes with its content, unknown elements are unwrapped with
  their text in place, attributes outside the allowlist and every ``on*`` handler go;
- SVG (inline and standalone) and MathML: scripts, ``foreignObject``, animation and
  ``annotation-xml`` go, and so do other namespaces' elements;
- every URL (attribute, ``url()``, ``@import``) points at a shipped file or a fragment of its own
  document, or it goes: remote, ``javascript:`` in any spelling, ``data:``, missing files;
- CSS: ``expression()``, ``behavior``, unknown at-rules and what tinycss2 cannot parse go;
- ``parse_xml`` reads no external entity, writes HTML's named and the document's own entities
  as characters (bounded) and refuses what is not well-formed.

The whole read-along EPUB built from a hostile source is in ``tests/unit/books/test_readalong_source.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from tts_queue.books.readalong.media import Kind
from tts_queue.books.readalong.sanitize import (
    clean_css,
    clean_document,
    clean_style,
    clean_svg,
    resolve,
)
from tts_queue.books.readalong.tree import parse_xml
from tts_queue.errors import InvalidBook

XHTML = "http://www.w3.org/1999/xhtml"
SVG = "http://www.w3.org/2000/svg"
MATH = "http://www.w3.org/1998/Math/MathML"
OPS = "http://www.idpf.org/2007/ops"
XLINK = "http://www.w3.org/1999/xlink"
X = f"{{{XHTML}}}"
PATH = "text/ch1.xhtml"
KINDS = {".xhtml": Kind.DOCUMENT, ".png": Kind.IMAGE, ".svg": Kind.IMAGE, ".css": Kind.STYLE,
         ".woff": Kind.FONT}
SHIPPED = frozenset({PATH, "text/ch2.xhtml", "images/a.png", "images/cover.svg", "css/style.css",
                     "css/more.css", "fonts/f.woff"})


def shipped(path: str) -> tuple[Kind, str] | None:
    """Each shipped file's kind, by its extension, under its own name."""
    return (KINDS[Path(path).suffix], path) if path in SHIPPED else None


def cleaned(body: str, head: str = "") -> etree._Element:
    """A content document at ``PATH`` with ``body`` (and ``head``), parsed and cleaned."""
    root = parse_xml(f'<html xmlns="{XHTML}" xmlns:epub="{OPS}" xmlns:svg="{SVG}" xmlns:xlink="{XLINK}">'
                     f"<head><title>T</title>{head}</head><body>{body}</body></html>".encode())
    clean_document(root, PATH, shipped)
    return root


def body_of(root: etree._Element) -> str:
    """The body's markup, namespace declarations left out."""
    body = root.find(f"{X}body")
    assert body is not None
    text = str(etree.tostring(body, encoding="unicode", with_tail=False))
    return text.split(">", 1)[1].rsplit("<", 1)[0]


def svg_cleaned(markup: str, path: str = "images/drawing.svg") -> etree._Element:
    """An SVG image at ``path`` (not shipped: its fragments are found as its own) with ``markup``."""
    root = parse_xml(f'<svg xmlns="{SVG}" xmlns:xlink="{XLINK}">{markup}</svg>'.encode())
    clean_svg(root, path, shipped)
    return root


def local_names(root: etree._Element) -> set[str]:
    return {etree.QName(e).localname for e in root.iter() if isinstance(e.tag, str)}


@pytest.mark.parametrize("markup", [
    "<script>alert(1)</script>",
    '<iframe src="ch2.xhtml">inside</iframe>',
    '<object data="a.swf"><param name="movie" value="a.swf"/>fallback</object>',
    '<embed src="a.swf"/>',
    '<form action="http://evil.example/"><input name="q"/><button>go</button><select><option>1</option>'
    "</select><textarea>t</textarea></form>",
    '<video src="v.mp4"><source src="v.webm"/><track src="t.vtt"/>no video</video>',
    "<audio><source src='a.mp3'/>no audio</audio>",
    "<noscript>enable scripts</noscript>",
    "<template><p>later</p></template>",
    "<canvas>drawing</canvas>",
    '<applet code="a.class">applet</applet>',
    "<frameset><frame src='ch2.xhtml'/></frameset>",
])
def test_what_runs_embeds_or_submits_goes_with_its_content(markup: str) -> None:
    # Given a paragraph with such an element between two text runs
    # When the document is cleaned
    root = cleaned(f"<p>before {markup} after</p>")
    # Then the element and everything in it are gone, the text around it stays in order
    assert body_of(root) == "<p>before  after</p>"


def test_a_script_between_text_runs_keeps_the_tail_text() -> None:
    # Given scripts after an element and between text runs (lxml keeps a tail with its element)
    root = cleaned("<p>one <b>two</b><script>x()</script> three <script>y()</script>four<script/></p>")
    # Then each script's tail text is where the script was
    assert body_of(root) == "<p>one <b>two</b> three four</p>"


def test_unknown_elements_are_unwrapped_with_text_and_tail_in_order() -> None:
    # Given EPUB 2 presentational elements, one holding a block, one inside another
    root = cleaned('<p>a <font color="red">b</font> c</p><center><p>d <big>e <tt>f</tt></big> g</p></center>'
                   '<p><acronym title="x">h</acronym>i<picture><img src="../images/a.png" alt=""/>'
                   "</picture></p>")
    # Then the elements are gone and their text and children stay where they were
    assert body_of(root) == ('<p>a b c</p><p>d e f g</p>'
                             '<p>hi<img src="../images/a.png" alt=""/></p>')


def test_head_keeps_charset_named_meta_and_shipped_stylesheets_only() -> None:
    # Given a head with metadata, a base, and stylesheet links shipped, missing and remote
    root = cleaned("", head=(
        '<meta charset="utf-8"/><meta name="author" content="A. Writer"/>'
        '<meta http-equiv="refresh" content="0;url=http://evil.example/"/><base href="http://evil.example/"/>'
        '<link rel="stylesheet" type="text/css" href="../css/style.css"/>'
        '<link rel="stylesheet" href="../css/missing.css"/><link rel="stylesheet" href="http://evil.example/x.css"/>'
        '<link rel="icon" href="../images/a.png"/><link rel="stylesheet" href="#top"/>'))
    head = root.find(f"{X}head")
    assert head is not None
    # Then the charset and named metadata stay, the refresh and base go, and only the shipped
    # stylesheet is linked
    kept = [(etree.QName(e).localname, dict(e.attrib)) for e in head]
    assert kept == [
        ("title", {}), ("meta", {"charset": "utf-8"}), ("meta", {"name": "author", "content": "A. Writer"}),
        ("link", {"rel": "stylesheet", "type": "text/css", "href": "../css/style.css"})]


def test_a_style_elements_text_goes_through_the_css_allowlist() -> None:
    # Given a style element with a remote url() and a javascript: url()
    root = cleaned("", head="<style>p { color: red; background: url(http://evil.example/x.png) }\n"
                            "h1 { background-image: url('javascript:alert(1)'); margin: 0 }</style>")
    style = root.find(f"{X}head/{X}style")
    assert style is not None and style.text is not None
    # Then the declarations with the URLs are gone and the others stay
    assert "color: red" in style.text and "margin: 0" in style.text
    assert "evil" not in style.text and "javascript" not in style.text


@pytest.mark.parametrize("markup", [
    '<p onclick="alert(1)" id="k">t</p>',
    '<p id="k"><img src="../images/a.png" alt="" ONERROR="alert(1)"/></p>',
    f'<svg xmlns="{SVG}" id="k" onload="alert(1)"><rect OnMouseOver="alert(1)" width="1" height="1"/></svg>',
    f'<math xmlns="{MATH}" id="k"><mi onclick="alert(1)">x</mi></math>',
])
def test_event_handlers_go_in_any_case(markup: str) -> None:
    # Given an element with an event handler attribute (lower, upper or mixed case)
    root = cleaned(markup)
    # Then no attribute of the document starts with "on", and the element is kept
    assert not [k for e in root.iter() for k in e.attrib if etree.QName(k).localname.lower().startswith("on")]
    assert root.find(".//*[@id='k']") is not None


def test_attributes_outside_the_allowlist_go() -> None:
    # Given EPUB 2 and data attributes beside global, ARIA, xml:lang and epub:type ones
    root = cleaned('<p id="p1" align="center" data-x="1" class="c" title="t" aria-label="l" role="note" '
                   'xml:lang="en" epub:type="z3998:verse" epub:prefix="x: y" xml:base="http://evil.example/">'
                   '<a name="old" href="#p1" target="_blank">x</a></p>'
                   '<table border="1"><tr><td colspan="2" bgcolor="red">c</td></tr></table>')
    p = root.find(f".//{X}p")
    assert p is not None
    # Then the allowed ones stay, the others go
    assert set(p.attrib) == {"id", "class", "title", "aria-label", "role",
                             "{http://www.w3.org/XML/1998/namespace}lang", f"{{{OPS}}}type"}
    assert dict(p[0].attrib) == {"href": "#p1"}
    td = root.find(f".//{X}td")
    assert td is not None and dict(td.attrib) == {"colspan": "2"}
    table = root.find(f".//{X}table")
    assert table is not None and dict(table.attrib) == {}


def test_the_root_keeps_its_epub_prefix() -> None:
    # Given a document whose html element declares an epub:prefix
    root = parse_xml(f'<html xmlns="{XHTML}" xmlns:epub="{OPS}" epub:prefix="z3998: http://x/" dir="ltr">'
                     "<head><title>T</title></head><body/></html>".encode())
    # When it is cleaned
    clean_document(root, PATH, shipped)
    # Then the prefix stays
    assert dict(root.attrib) == {f"{{{OPS}}}prefix": "z3998: http://x/", "dir": "ltr"}


@pytest.mark.parametrize(("href", "kept"), [
    ("ch2.xhtml", True),
    ("ch2.xhtml#sec", True),
    ("#n1", True),
    ("../text/ch2.xhtml", True),
    ("ch%32.xhtml", True),
    ("../images/a.png", False),
    ("../css/style.css", False),
    ("ch3.xhtml", False),
    ("../../ch2.xhtml", False),
    ("/text/ch2.xhtml", False),
    ("javascript:alert(1)", False),
    ("JaVaScRiPt:alert(1)", False),
    ("  javascript:alert(1)", False),
    ("java&#9;script:alert(1)", False),
    ("&#10;java&#13;script&#9;:alert(1)", False),
    ("vbscript:msgbox(1)", False),
    ("data:text/html,x", False),
    ("http://evil.example/", False),
    ("HTTPS://evil.example/", False),
    ("//evil.example/x.xhtml", False),
    ("\\\\evil.example\\x.xhtml", False),
    ("mailto:a@evil.example", False),
    ("file:///etc/passwd", False),
    ("ch2.xhtml?x=1", False),
])
def test_a_link_keeps_its_href_only_when_it_points_inside_the_book(href: str, kept: bool) -> None:
    # Given a link with that href (XML character references make tabs and line ends)
    root = cleaned(f'<p>see <a href="{href}" class="l">this</a> now</p>')
    a = root.find(f".//{X}a")
    # Then the link stays with its text; its href only when it points at a shipped content
    # document (an image or a style sheet is not one) or a fragment of the document
    assert a is not None and a.text == "this" and a.get("class") == "l"
    assert (a.get("href") is not None) is kept


@pytest.mark.parametrize(("src", "kept"), [
    ("../images/a.png", True),
    ("http://evil.example/a.png", False),
    ("https://evil.example/a.png", False),
    ("//evil.example/a.png", False),
    ("data:image/png;base64,iVBORw0KGgo=", True),
    ("DATA:image/jpeg;base64,/9j/4AAQ", True),
    ("data:image/svg+xml;base64,PHN2Zz4=", False),
    ("data:text/html;base64,PHNjcmlwdD4=", False),
    ("data:image/png;base64,PHNjcmlwdD4=", False),
    ("data:image/gif;base64,/9j/4AAQ", False),
    ("data:image/png,not-base64", False),
    ("../images/missing.png", False),
    ("javascript:alert(1)", False),
    ("#frag", False),
])
def test_an_image_goes_unless_its_source_is_shipped(src: str, kept: bool) -> None:
    # Given an image between text runs
    root = cleaned(f'<p>a <img src="{src}" alt="pic"/> b</p>')
    # Then it stays only when its source is a shipped file or a raster image written in base64
    # into the URL (an SVG, which could script, or anything else in a data: URL goes); the text
    # around it stays either way
    assert (root.find(f".//{X}img") is not None) is kept
    assert "".join(root.find(f".//{X}p").itertext()) == "a  b"


def test_a_url_points_only_at_a_shipped_file_of_its_kind() -> None:
    # Given a stylesheet link to an image, an image showing a document and a style sheet, and
    # a link to a style sheet
    root = cleaned('<p><img src="ch2.xhtml" alt=""/><img src="../css/style.css" alt=""/>'
                   '<a href="../css/style.css">s</a></p>',
                   head='<link rel="stylesheet" href="../images/a.png"/>')
    # Then each goes: nothing is loaded as what it is not
    assert root.find(f".//{X}img") is None and root.find(f".//{X}link") is None
    assert root.find(f".//{X}a").get("href") is None


def test_kept_urls_point_at_the_files_shipped_names() -> None:
    # Given a package that ships each file under a name of its own choosing
    names = {PATH: (Kind.DOCUMENT, "text/0001.xhtml"), "text/ch2.xhtml": (Kind.DOCUMENT, "text/0002.xhtml"),
             "images/a.png": (Kind.IMAGE, "images/0003.png"),
             "css/style.css": (Kind.STYLE, "styles/0004.css"), "fonts/f.woff": (Kind.FONT, "fonts/0005.woff")}
    root = parse_xml(f'<html xmlns="{XHTML}"><head><title>T</title><link rel="stylesheet" '
                     'href="../css/style.css"/></head><body><p id="x"><a href="ch2.xhtml#n">n</a>'
                     '<a href="ch1.xhtml">me</a><a href="#x">here</a><img src="../images/a.png" alt=""/>'
                     '<span style="background: url(\'../images/a.png\')">s</span></p></body></html>'.encode())
    # When the document and a style sheet are cleaned
    clean_document(root, PATH, names.get)
    css = clean_css('@import "style.css"; @font-face { src: url(../fonts/f.woff) } p { background: '
                    'image-set("../images/a.png" 1x) }', "css/more.css", names.get)
    # Then every URL kept points at the shipped name, from where its own file ships
    hrefs = [e.get("href") or e.get("src") or e.get("style")
             for e in root.iter() if set(e.attrib) - {"id", "rel"}]
    assert hrefs == ["../styles/0004.css", "0002.xhtml#n", "0001.xhtml", "#x", "../images/0003.png",
                     'background: url("../images/0003.png");']
    assert css == ('@import url("../styles/0004.css");\n@font-face {\nsrc: url(../fonts/0005.woff);\n}\n'
                   'p {\nbackground: image-set("../images/0003.png" 1x);\n}')


@pytest.mark.parametrize("markup", [
    f'<svg xmlns="{SVG}"><a HREF="javascript:alert(1)" id="k"><rect width="1" height="1"/></a></svg>',
    f'<svg xmlns="{SVG}"><image href="../images/a.png" SRC="http://evil.example/a.png" id="k"/></svg>',
    f'<svg xmlns="{SVG}"><rect id="k" STYLE="fill: url(http://evil.example/)" Href="#x"/></svg>',
    f'<math xmlns="{MATH}" id="k" HREF="javascript:alert(1)" AltImg="http://evil.example/m.png"><mi>x</mi></math>',
])
def test_svg_and_mathml_attribute_names_are_compared_without_case(markup: str) -> None:
    # Given an SVG or MathML element with a URL or style attribute named in another case (an
    # HTML parser lowercases it)
    root = cleaned(markup)
    # Then it goes, and the element stays
    [kept] = root.iterfind(".//*[@id='k']")
    assert {etree.QName(k).localname for k in kept.attrib} <= {"id", "href"}
    assert "evil" not in etree.tostring(root, encoding="unicode")
    assert "javascript" not in etree.tostring(root, encoding="unicode")


def test_other_url_attributes_go_alone() -> None:
    # Given a quotation citing a remote page and another citing a shipped document
    root = cleaned('<blockquote cite="http://evil.example/">q</blockquote><q cite="ch2.xhtml">r</q>')
    # Then the remote citation goes, the element and the shipped citation stay
    quote = root.find(f".//{X}blockquote")
    assert quote is not None and "cite" not in quote.attrib and quote.text == "q"
    assert root.find(f".//{X}q[@cite='ch2.xhtml']") is not None


@pytest.mark.parametrize("inline", [True, False])
def test_svg_scripts_foreign_objects_and_animation_go(inline: bool) -> None:
    # Given an SVG with a script, a foreignObject, animations rewriting a link's href, metadata,
    # a switch, and an XHTML element put straight inside it
    markup = (f'<script>alert(1)</script><foreignObject><p xmlns="{XHTML}">hidden</p></foreignObject>'
              '<a href="#r"><set attributeName="href" to="javascript:alert(1)"/>'
              '<animate attributeName="href" values="javascript:alert(1)"/>'
              '<animateTransform attributeName="transform"/><animateMotion path="M0 0"/>'
              '<rect id="r" width="1" height="1"/></a><metadata>m</metadata><switch><g/></switch>'
              f'<p xmlns="{XHTML}">stray</p><handler>h</handler>')
    if inline:
        root = cleaned(f'<svg xmlns="{SVG}">{markup}</svg>')
    else:
        root = svg_cleaned(markup)
    # Then only the link and its shape are left
    svg = root if not inline else root.find(f".//{{{SVG}}}svg")
    assert svg is not None
    assert local_names(svg) == {"svg", "a", "rect"}
    assert "hidden" not in etree.tostring(root, encoding="unicode")


def test_svg_urls_point_at_shipped_files_or_fragments_of_the_same_document() -> None:
    # Given an SVG image with references to itself, to shipped and missing files, and remote ones
    root = svg_cleaned(
        '<defs><linearGradient id="g"><stop offset="0"/></linearGradient></defs>'
        '<use id="u1" href="#g"/><use id="u2" xlink:href="http://evil.example/x.svg#a"/>'
        '<image id="i1" xlink:href="a.png" width="1" height="1"/>'
        '<image id="i2" href="http://evil.example/a.png"/><image id="i3" href="missing.png"/>'
        '<image id="i4" xlink:href="data:image/jpeg;base64,/9j/4AAQ"/>'
        '<image id="i5" href="data:image/svg+xml;base64,PHN2Zz4="/>'
        '<rect id="r" fill="url(#g)" filter="url(http://evil.example/f.svg#x)" '
        'clip-path="u\\72l(//evil.example/c)" '
        'style="fill: url(http://evil.example/p.png); stroke: red" xlink:title="t" xml:space="preserve" '
        'xml:base="http://evil.example/" transform="rotate(45)"/>'
        '<style>rect { fill: url(#g) } circle { fill: url(http://evil.example/) }</style>')
    by_id = {e.get("id"): e for e in root.iter() if e.get("id")}
    # Then the fragment and shipped references stay (and a raster image in a data: URL), an image
    # pointing elsewhere goes, and the
    # other attributes pointing elsewhere go (escaped url() too)
    assert by_id["u1"].get("href") == "#g" and dict(by_id["u2"].attrib) == {"id": "u2"}
    assert by_id["i1"].get(f"{{{XLINK}}}href") == "a.png"
    assert by_id["i4"].get(f"{{{XLINK}}}href") == "data:image/jpeg;base64,/9j/4AAQ"  # a cover's picture
    assert "i2" not in by_id and "i3" not in by_id and "i5" not in by_id
    assert dict(by_id["r"].attrib) == {
        "id": "r", "fill": "url(#g)", "style": "stroke: red;", f"{{{XLINK}}}title": "t",
        "{http://www.w3.org/XML/1998/namespace}space": "preserve", "transform": "rotate(45)"}
    style = root.find(f"{{{SVG}}}style")
    assert style is not None and "url(#g)" in (style.text or "") and "evil" not in (style.text or "")


def test_inline_svg_resolves_against_its_document() -> None:
    # Given inline SVG using a fragment of its document and the shipped image beside it
    root = cleaned(f'<svg xmlns="{SVG}" xmlns:xlink="{XLINK}"><use xlink:href="#s"/><use href="ch1.xhtml#s"/>'
                   f'<image href="../images/a.png"/><image href="a.png"/></svg><rect xmlns="{SVG}"/>')
    svg = root.find(f".//{{{SVG}}}svg")
    assert svg is not None
    # Then both references stay, the image found from the document's folder stays, the other
    # goes, and SVG outside an svg element goes
    assert [dict(e.attrib) for e in svg] == [{f"{{{XLINK}}}href": "#s"}, {"href": "#s"},
                                             {"href": "../images/a.png"}]
    assert len(list(root.iter(f"{{{SVG}}}rect"))) == 0


def test_mathml_keeps_its_elements_but_not_annotation_xml_or_links() -> None:
    # Given MathML with an XHTML annotation, a link and a script-bearing attribute
    root = cleaned(f'<p><math xmlns="{MATH}" display="block" altimg="http://evil.example/m.png" '
                   'xml:lang="en" xml:base="http://evil.example/" xlink:type="simple">'
                   '<semantics><mrow><mi href="http://evil.example/" mathvariant="bold">x</mi><mo>=</mo>'
                   '<mn src="x">1</mn></mrow><annotation-xml encoding="application/xhtml+xml">'
                   f'<p xmlns="{XHTML}">annotation</p></annotation-xml>'
                   '<annotation encoding="TeX">x=1</annotation></semantics></math></p>')
    math = root.find(f".//{{{MATH}}}math")
    assert math is not None
    # Then the formula and its text annotation stay; annotation-xml and URLs go
    assert local_names(math) == {"math", "semantics", "mrow", "mi", "mo", "mn", "annotation"}
    assert dict(math.attrib) == {"display": "block", "{http://www.w3.org/XML/1998/namespace}lang": "en"}
    tokens = math.iter(f"{{{MATH}}}mi", f"{{{MATH}}}mn")
    assert [dict(e.attrib) for e in tokens] == [{"mathvariant": "bold"}, {}]


def test_elements_of_other_namespaces_go_with_their_content() -> None:
    # Given an epub:switch (EPUB 3.0) and an element of an unknown namespace
    root = cleaned(f'<p>a<epub:switch><epub:case required-namespace="{MATH}">case</epub:case>'
                   '<epub:default>default</epub:default></epub:switch>b<x:y xmlns:x="urn:x">y</x:y>c</p>')
    # Then they and their content are gone, the text around them stays
    assert body_of(root) == "<p>abc</p>"


@pytest.mark.parametrize(("css", "left"), [
    ("@import url(http://evil.example/x.css);\np { color: red; }", "p {\ncolor: red;\n}"),
    ('@import "javascript:alert(1)";', ""),
    ("@import url(../images/a.png);", ""),
    ("@import url(missing.css);", ""),
    ('@import "more.css" print;', '@import url("more.css");'),
    ('@import url("more.css") supports(background: url(http://evil.example/x)) layer(url(//evil.example/));',
     '@import url("more.css");'),
    ("@import url(../images/a.png) screen;", ""),
    ("@namespace e url(http://evil.example/x);", ""),
    ("@namespace svg url(http://www.w3.org/2000/svg);", '@namespace svg "http://www.w3.org/2000/svg";'),
    ("@media (min-width: 1px) and (url(http://evil.example/)) { p { color: red } }", ""),
    ("p { background: url(http://evil.example/a.png); color: red }", "p {\ncolor: red;\n}"),
    ("p { background: url(javascript:alert(1)); color: red }", "p {\ncolor: red;\n}"),
    ("p { background: url('JavaScript:alert(1)') }", "p {\n}"),
    ("p { background: url(data:image/png;base64,AAAA) }", "p {\n}"),
    ('p { background: -webkit-image-set("http://evil.example/a.png" 1x) }', "p {\n}"),
    ('p { background: image-set("../images/a.png" 1x) }',
     'p {\nbackground: image-set("../images/a.png" 1x);\n}'),
    ("p { background: url(../images/a.png) }", "p {\nbackground: url(../images/a.png);\n}"),
    ("p { background: url(../images/missing.png) }", "p {\n}"),
    ("p { width: expression(alert(1)); color: red }", "p {\ncolor: red;\n}"),
    ("p { behavior: url(more.css); -moz-binding: url(more.css#x); color: red }", "p {\ncolor: red;\n}"),
    ('p { --u: "../images/a.png"; background: src(var(--u)) }', 'p {\n--u: "../images/a.png";\n}'),
    ('@charset "utf-8";\n@namespace epub "http://www.idpf.org/2007/ops";',
     '@namespace epub "http://www.idpf.org/2007/ops";'),
    ("@media print { p { color: red; background: url(//evil.example/a) } }",
     "@media print {\np {\ncolor: red;\n}\n}"),
    ("@supports (display: grid) { div { display: grid } }",
     "@supports (display: grid) {\ndiv {\ndisplay: grid;\n}\n}"),
    ('@font-face { font-family: F; src: url(../fonts/f.woff) format("woff"), '
     "url(http://evil.example/f.woff) }",
     "@font-face {\nfont-family: F;\n}"),
    ("@page :first { margin: 0; @top-center { content: 'x' } }", "@page :first {\nmargin: 0;\n}"),
    ("@keyframes k { from { opacity: 0 } } @font-feature-values F { @styleset { x: 1 } } p { color: red }",
     "p {\ncolor: red;\n}"),
    ("p { color: red } } ] a { color: blue; ) }", "p {\ncolor: red;\n}"),
    ("div { & p { cursor: url(javascript:x), auto; color: blue } }", "div {\n& p {\ncolor: blue;\n}\n}"),
])
def test_a_stylesheet_keeps_only_what_is_allowed(css: str, left: str) -> None:
    # Given a stylesheet at css/style.css
    # When it is cleaned
    result = clean_css(css, "css/style.css", shipped)
    # Then what is left is the allowed part, written as it was
    assert result == left


def test_deeply_nested_css_is_dropped_without_recursion() -> None:
    # Given a value nested thousands of parentheses deep, and rules nested thousands deep
    value = "p { width: " + "(" * 5000 + ")" * 5000 + "; color: red } a { color: blue }"
    rules = "@media print {" * 1500 + "p { color: red }" + "}" * 1500
    # Then the deep value goes and the rest stays, and the deep rules are written out
    assert clean_css(value, "css/style.css", shipped) == "p {\ncolor: red;\n}\na {\ncolor: blue;\n}"
    assert clean_css(rules, "css/style.css", shipped).count("color: red") == 1


@pytest.mark.parametrize(("style", "left"), [
    ("color: red; background: url(http://evil.example/a.png)", "color: red;"),
    ("background: url(javascript:alert(1))", None),
    ("width: expression(alert(1))", None),
    ("background-image: url(../images/a.png); font-weight: bold", "background-image: url(../images/a.png); "
                                                                  "font-weight: bold;"),
])
def test_a_style_attribute_keeps_its_allowed_declarations(style: str, left: str | None) -> None:
    # Given a paragraph with that style attribute
    root = cleaned(f'<p style="{style}">t</p>')
    # Then its allowed declarations stay, and the attribute goes when none is left
    assert root.find(f".//{X}p").get("style") == left
    assert clean_style(style, PATH, shipped) == (left or "")


@pytest.mark.parametrize(("base", "url", "expected"), [
    ("text/ch1.xhtml", "ch2.xhtml", "text/ch2.xhtml"),
    ("text/ch1.xhtml", "#x", "text/ch1.xhtml#x"),
    ("text/ch1.xhtml", "../images/a%20b.png", "images/a b.png"),
    ("text/ch1.xhtml", "./ch2.xhtml#p%201", "text/ch2.xhtml#p%201"),
    ("ch1.xhtml", "text/../ch2.xhtml", "ch2.xhtml"),
    ("text/ch1.xhtml", "../../x.png", None),
    ("text/ch1.xhtml", "%2e%2e/%2e%2e/x.png", None),
    ("text/ch1.xhtml", "%2Fetc/passwd", None),
    ("text/ch1.xhtml", "/images/a.png", None),
    ("text/ch1.xhtml", "//evil.example/a.png", None),
    ("text/ch1.xhtml", "\\\\evil.example\\a.png", None),
    ("text/ch1.xhtml", "\x01 java\tscript:alert(1)", None),
    ("text/ch1.xhtml", "JAVASCRIPT:alert(1)", None),
    ("text/ch1.xhtml", "data:,x", None),
    ("text/ch1.xhtml", "a%23b.png", None),
    ("text/ch1.xhtml", "ch2.xhtml?x=1", None),
    ("text/ch1.xhtml", " ch\n2.xh\ttml\x00", "text/ch2.xhtml"),
    ("text/ch1.xhtml", "", None),
])
def test_resolve(base: str, url: str, expected: str | None) -> None:
    # Given a URL in a document; then it resolves to a package path, or to nothing
    assert resolve(base, url) == expected


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol">
<!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
<!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
<!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
<!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
<!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
<!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
<!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]><html xmlns="http://www.w3.org/1999/xhtml"><body><p>&lol9;</p></body></html>"""


def test_parse_xml_never_expands_entities() -> None:
    # Given a billion-laughs document: it is refused, or its entity is left as it is
    try:
        root = parse_xml(BILLION_LAUGHS)
    except InvalidBook:
        return
    assert len(etree.tostring(root)) < 1000


def test_parse_xml_reads_no_external_entity(tmp_path: Path) -> None:
    # Given a secret file and a document naming it in an entity and in an external DTD, and an
    # entity of its own
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET")
    dtd = tmp_path / "evil.dtd"
    dtd.write_text('<!ENTITY leak "LEAKED">')
    data = (f'<!DOCTYPE html [<!ENTITY s SYSTEM "file://{secret}"><!ENTITY % d SYSTEM "file://{dtd}"> %d;'
            f'<!ENTITY i "INTERNAL">]><html xmlns="{XHTML}"><head><title>T</title></head><body>'
            "<p>a&s;b&leak;c&nbsp;d&mdash;e&i;</p>"
            "<!-- comment --><?pi x?></body></html>").encode()
    # When it is parsed and cleaned
    root = parse_xml(data)
    text = etree.tostring(root, encoding="unicode")
    clean_document(root, PATH, shipped)
    # Then nothing was read; the unknown entities are gone, HTML's named ones are characters and
    # the document's own is its text
    assert "SECRET" not in text and "LEAKED" not in text
    assert "comment" not in text and "<?pi" not in text
    assert body_of(root) == "<p>abc\u00a0d\u2014eINTERNAL</p>"


def test_entities_in_text_and_attributes_are_written_as_characters() -> None:
    # Given an EPUB 2 document (its DTD not loaded) with HTML's named entities in text and in an
    # attribute, one in a CDATA section, and a document with an internal subset used in both
    epub2 = (f'<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">'
             f'<html xmlns="{XHTML}"><head><title>T</title></head><body><p title="caf&eacute; &amp; tea" '
             f'hidden="hidden">caf&eacute;&nbsp;&lt;x&gt;</p><style><![CDATA[p::after{{content:"&eacute;"}}]]>'
             f"</style></body></html>").encode()
    own = (f'<!DOCTYPE html [<!ENTITY me "Watson"><!ENTITY eacute "E">]><html xmlns="{XHTML}"><head>'
           f'<title>T</title></head><body><p title="Dr &me; &eacute;">Dr &me; &eacute;.</p>'
           f"</body></html>").encode()
    # When each is parsed and cleaned
    first, second = parse_xml(epub2), parse_xml(own)
    clean_document(first, PATH, shipped)
    clean_document(second, PATH, shipped)
    # Then the characters stand in text and attributes (the document's own declaration wins), the
    # CDATA section is left as written, and hidden stays
    assert body_of(first).startswith('<p title="caf\u00e9 &amp; tea" hidden="hidden">'
                                     'caf\u00e9\u00a0&lt;x&gt;</p>')
    assert 'content:"&amp;eacute;"' in body_of(first)  # the text "&eacute;", escaped
    assert body_of(second) == '<p title="Dr Watson E">Dr Watson E.</p>'
    # And written with the plain doctype that read-along documents carry, each reads again the same
    for root in (first, second):
        data = etree.tostring(root, encoding="utf-8", xml_declaration=True, doctype="<!DOCTYPE html>")
        assert etree.tostring(parse_xml(data)) == etree.tostring(root)


def test_entity_references_may_not_add_more_than_the_document_holds() -> None:
    # Given an internal entity of 2,000 characters referenced 100 times (flat: no nesting for
    # libxml2 to refuse)
    data = (f'<!DOCTYPE html [<!ENTITY big "{"x" * 2000}">]><html xmlns="{XHTML}"><head><title>T</title>'
            f'</head><body><p>{"&big;" * 100}</p></body></html>').encode()
    # Then it is refused (the read-along falls back to its generated text)
    with pytest.raises(InvalidBook, match="entity references"):
        parse_xml(data)


@pytest.mark.parametrize("data", [b"<html><body><p>unclosed</body></html>", b"", b"not xml",
                                  b"<r>" + b"<d>" * 300 + b"</d>" * 300 + b"</r>"])
def test_parse_xml_refuses_what_is_not_well_formed(data: bytes) -> None:
    # Given malformed XML (or elements nested deeper than libxml2 keeps): then it is refused
    with pytest.raises(InvalidBook):
        parse_xml(data)


def test_a_document_of_the_wrong_kind_is_refused() -> None:
    # Given an SVG document given as XHTML, and an XHTML one given as SVG: then both are refused
    with pytest.raises(InvalidBook):
        clean_document(parse_xml(f'<svg xmlns="{SVG}"/>'.encode()), PATH, shipped)
    with pytest.raises(InvalidBook):
        clean_svg(parse_xml(f'<html xmlns="{XHTML}"/>'.encode()), "images/cover.svg", shipped)


REALISTIC = f"""<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">
<html xmlns="{XHTML}" xmlns:epub="{OPS}" xml:lang="en">
<head><meta http-equiv="Content-Type" content="text/html; charset=utf-8"/><title>Chapter One</title>
<link rel="stylesheet" type="text/css" href="../css/style.css"/><script src="../js/a.js"></script></head>
<body class="chapter" epub:type="bodymatter">
<section id="ch1" class="chapter" epub:type="chapter">
<h1 id="h1" class="title" align="center">Chapter&nbsp;One</h1>
<p id="p1" class="first" onclick="track()">It was a dark and <em class="x">stormy</em> night;<a id="r1"
 epub:type="noteref" href="#n1" class="ref">1</a> the rain fell in torrents.</p>
<div class="figure" id="f1"><img src="../images/a.png" alt="A storm" width="10" height="10"/>
<p class="caption" id="c1"><font size="2">A storm at sea</font></p></div>
<table id="t1" class="data" border="1"><tr><th scope="col">Day</th><td>Monday</td></tr></table>
<p id="p2">Back to <a href="ch2.xhtml#start" class="xref">the next chapter</a> or <a
 href="http://example.com/">the web</a>.</p>
<aside id="n1" epub:type="footnote" class="note"><p id="np1">A note.</p></aside>
</section></body></html>"""


def marks(root: etree._Element) -> tuple[list[str], list[str], list[str]]:
    """Every id, class and epub:type of a document, in document order."""
    return ([str(v) for v in root.xpath("//@id")], [str(v) for v in root.xpath("//@class")],
            [str(v) for v in root.xpath("//@epub:type", namespaces={"epub": OPS})])


def test_a_realistic_document_keeps_its_ids_classes_types_and_text() -> None:
    # Given an EPUB 2-style chapter with a footnote, figure, table, a script and handlers
    root = parse_xml(REALISTIC.encode())
    before = marks(root)
    text = "".join(root.find(f"{X}body").itertext())
    # When it is cleaned
    clean_document(root, PATH, shipped)
    # Then every id, class and epub:type is still there, and the body's text (the entity as its
    # character) is unchanged
    assert marks(root) == before
    assert "".join(root.find(f"{X}body").itertext()) == text.replace("&nbsp;", "\u00a0")
    # And the script, handler, presentational attributes and remote link are gone
    markup = etree.tostring(root, encoding="unicode")
    for gone in ("script", "onclick", "align=", "border=", "http://example.com", "<font", "http-equiv"):
        assert gone not in markup
    assert 'href="#n1"' in markup and 'href="ch2.xhtml#start"' in markup and 'src="../images/a.png"' in markup
