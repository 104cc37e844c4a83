"""The allowlist a source EPUB's content passes before it goes into a read-along EPUB: its XHTML
content documents (with inline SVG and MathML), its SVG images and its style sheets.

What is kept is what EPUB 3 allows and nothing that runs or fetches:

- XHTML: the HTML5 elements EPUB 3 allows, with their own attributes and the global ones
  (``hidden`` among them: a hidden landmarks list stays hidden);
  scripts, frames, plug-ins, forms, media and the like are removed with their content, other
  elements (EPUB 2's ``center``, ``font``) unwrapped, their text kept in place;
- SVG: shapes, text, gradients, patterns, masks and simple filters; no script, no
  ``foreignObject``, no animation; MathML without ``annotation-xml``; any other namespace's
  elements are removed;
- CSS: ``sanitize_css``'s rules, with this module's URL policy;
- every URL (an attribute, a ``url()``, an ``@import``) resolves (``resolve``) to a file that is
  shipped (``Shipped``) or to a fragment of its own document; a URL that is remote, has a scheme
  (``javascript:``, ``data:``...), is absolute or climbs out of the package goes, and with it an
  image, a stylesheet link, a declaration or an ``@import``; a link keeps its text. The one URL
  with a scheme kept is an image's raster ``data:`` URL (PNG, JPEG, GIF, WebP in base64: nothing
  fetched, nothing run), as covers often embed their picture so;
- an entity reference becomes its character where HTML names it (``&nbsp;`` in an EPUB 2
  document), its text where the document's internal subset declares it (``parse_xml``), else
  goes; a document whose root is not XHTML's ``html`` (SVG's ``svg``) is refused with
  ``InvalidBook``.

Bounds: ``parse_xml`` loads no DTD, resolves no entity and reads nothing from the network
(libxml2 refuses entity amplification and elements nested over 256 deep); the tree is walked once
with an explicit stack, each node judged once.
"""

from __future__ import annotations

import html.entities
import posixpath
import re
from collections.abc import Callable
from urllib.parse import unquote

from lxml import etree

from tts_queue.books.readalong.sanitize_css import StyleRules
from tts_queue.errors import InvalidBook

Shipped = Callable[[str], bool]
_RASTER_DATA = re.compile(r"data:image/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*", re.IGNORECASE)

XHTML_NS = "http://www.w3.org/1999/xhtml"
SVG_NS = "http://www.w3.org/2000/svg"
MATHML_NS = "http://www.w3.org/1998/Math/MathML"
XLINK_NS = "http://www.w3.org/1999/xlink"
XML_NS = "http://www.w3.org/XML/1998/namespace"
OPS_NS = "http://www.idpf.org/2007/ops"

# XHTML elements removed with their content, and those kept; any other is unwrapped.
REMOVED = frozenset({
    "script", "iframe", "frame", "frameset", "object", "embed", "applet", "form", "input", "button",
    "select", "textarea", "option", "noscript", "template", "canvas", "audio", "video", "source",
    "track", "base",
})
ALLOWED = frozenset({
    "html", "head", "title", "body", "section", "article", "aside", "nav", "header", "footer", "main",
    "h1", "h2", "h3", "h4", "h5", "h6", "hgroup", "p", "div", "span", "a", "em", "strong", "i", "b",
    "u", "s", "small", "sub", "sup", "abbr", "cite", "q", "dfn", "code", "kbd", "samp", "var", "mark",
    "time", "br", "hr", "wbr", "pre", "blockquote", "ol", "ul", "li", "dl", "dt", "dd", "figure",
    "figcaption", "img", "table", "caption", "thead", "tbody", "tfoot", "tr", "th", "td", "col",
    "colgroup", "ruby", "rt", "rp", "bdi", "bdo", "del", "ins", "address", "details", "summary",
    "data", "style", "link", "meta",
})
GLOBAL_ATTRIBUTES = frozenset({"id", "class", "title", "lang", "dir", "role", "style", "hidden"})
NS_ATTRIBUTES = frozenset({f"{{{XML_NS}}}lang", f"{{{OPS_NS}}}type"})
_EPUB_PREFIX = f"{{{OPS_NS}}}prefix"  # on the root html only
ELEMENT_ATTRIBUTES: dict[str, frozenset[str]] = {
    "a": frozenset({"href"}),
    "img": frozenset({"src", "alt", "width", "height"}),
    "td": frozenset({"colspan", "rowspan", "headers", "scope"}),
    "th": frozenset({"colspan", "rowspan", "headers", "scope"}),
    "ol": frozenset({"start", "reversed", "type"}),
    "li": frozenset({"value"}),
    "col": frozenset({"span"}),
    "colgroup": frozenset({"span"}),
    "blockquote": frozenset({"cite"}),
    "q": frozenset({"cite"}),
    "del": frozenset({"cite", "datetime"}),
    "ins": frozenset({"cite", "datetime"}),
    "time": frozenset({"datetime"}),
    "data": frozenset({"value"}),
    "link": frozenset({"rel", "href", "type", "media"}),
    "meta": frozenset({"charset", "name", "content"}),
    "style": frozenset({"type", "media"}),
}
_URL_ATTRIBUTES = frozenset({"href", "src", "cite"})
_REQUIRED_URL = {"img": "src", "link": "href"}  # an element that goes when this URL does

SVG_ELEMENTS = frozenset({
    "svg", "g", "defs", "symbol", "use", "title", "desc", "a", "path", "rect", "circle", "ellipse",
    "line", "polyline", "polygon", "text", "tspan", "textPath", "image", "linearGradient",
    "radialGradient", "stop", "clipPath", "mask", "pattern", "marker", "style", "filter",
    "feGaussianBlur", "feOffset", "feBlend", "feColorMatrix", "feFlood", "feComposite", "feMerge",
    "feMergeNode",
})
SVG_NS_ATTRIBUTES = frozenset({f"{{{XLINK_NS}}}href", f"{{{XLINK_NS}}}title", f"{{{XML_NS}}}lang",
                               f"{{{XML_NS}}}space"})

_KEEP, _REMOVE, _UNWRAP = "keep", "remove", "unwrap"  # what becomes of an element

_EDGES = "".join(chr(n) for n in range(0x21))  # C0 controls and space: stripped from a URL's ends
_INSIDE = str.maketrans("", "", "\t\n\r")  # removed anywhere in a URL, as browsers do
_FIRST_SEGMENT = re.compile(r"[/?#]")


def parse_xml(data: bytes) -> etree._Element:
    """Root element of an XML document (XHTML or SVG) parsed safely: no DTD loaded, no entities
    resolved, no network, comments and processing instructions removed, huge_tree off;
    ``InvalidBook`` when it is not well-formed XML.

    The tree holds no entity reference after it: an HTML name (``&eacute;`` in an EPUB 2
    document, which names no DTD the parser loads) is read as its character, in text and in
    attribute values alike; a reference to the document's own internal subset
    (``<!ENTITY me "Watson">``) is replaced with its text as declared, where it stands (all of
    them together adding at most the document's own size, else ``InvalidBook``: libxml2 already
    refuses the amplification of nested ones); any other goes.
    (The document is written again with the plain ``<!DOCTYPE html>``, which declares none.)"""
    parser = etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True, huge_tree=False,
                             remove_comments=True, remove_pis=True, attribute_defaults=False)
    try:
        root = etree.fromstring(_html_references(data), parser)
    except (etree.XMLSyntaxError, ValueError) as exc:
        raise InvalidBook(f"a document is not well-formed XML: {exc}") from exc
    subset = root.getroottree().docinfo.internalDTD
    declared = {entity.name: entity.content or "" for entity in subset.iterentities()} if subset else {}
    budget = len(data)  # what references may add in all: no more than the document itself
    for node in list(root.iter()):
        if isinstance(node, etree._Entity):
            text = declared.get(node.name or "", "")
            budget -= len(text)
            if budget < 0:
                raise InvalidBook("a document's entity references add more text than the document holds")
            _drop(node, text)
        elif isinstance(node.tag, str) and node.attrib:
            for key, value in node.attrib.items():  # as read: internal entities resolved once
                node.set(key, value)
    return root


_REFERENCE = re.compile(rb"&([A-Za-z][A-Za-z0-9]{0,31});")
_CDATA = re.compile(rb"(<!\[CDATA\[.*?\]\]>)", re.DOTALL)
_DECLARED = re.compile(rb"<!ENTITY\s+([A-Za-z][A-Za-z0-9]*)")
_XML_NAMES = frozenset({"amp", "lt", "gt", "quot", "apos"})


def _html_references(data: bytes) -> bytes:
    """``data`` with each reference to an HTML character name (not XML's own five) written as a
    numeric character reference, outside CDATA sections; a name the document declares itself
    wins (its internal subset is kept as it is)."""
    if b"&" not in data:
        return data
    subset_end = data.find(b"]>") if b"<!ENTITY" in data else -1
    declared = set(_DECLARED.findall(data[:subset_end])) if subset_end > 0 else set()

    def numeric(match: re.Match[bytes]) -> bytes:
        name = match.group(1)
        text = name.decode("ascii")
        character = html.entities.html5.get(f"{text};")
        if text in _XML_NAMES or name in declared or character is None:
            return match.group(0)
        return b"".join(b"&#%d;" % ord(c) for c in character)

    parts = _CDATA.split(data)
    return b"".join(part if n % 2 else _REFERENCE.sub(numeric, part) for n, part in enumerate(parts))


def resolve(base: str, url: str) -> str | None:
    """A URL found in the package-relative document ``base`` as a package-relative path plus an
    optional ``#fragment``; ``None`` when it is empty, has a scheme, is a network-path or absolute
    reference, has a query, or climbs above the package root. A fragment alone is ``base``'s."""
    text = url.strip(_EDGES).translate(_INSIDE).replace("\\", "/")  # "\" is "/" to browsers
    if not text or text.startswith("/") or ":" in _FIRST_SEGMENT.split(text, maxsplit=1)[0]:
        return None
    path, _, fragment = text.partition("#")
    if "?" in path:
        return None
    suffix = f"#{fragment}" if fragment else ""
    if not path:
        return base + suffix
    decoded = unquote(path)
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(base), decoded))
    if "#" in decoded or joined in (".", "..") or joined.startswith(("/", "../")):
        return None
    return joined + suffix


def clean_document(root: etree._Element, path: str, shipped: Shipped) -> None:
    """Sanitize an XHTML content document tree in place (``path``: its package-relative path);
    ``InvalidBook`` when its root is not XHTML's ``html``."""
    if root.tag != f"{{{XHTML_NS}}}html":
        raise InvalidBook(f"{path} is not an XHTML document")
    _Tree(_Policy(path, shipped)).clean(root)


def clean_svg(root: etree._Element, path: str, shipped: Shipped) -> None:
    """Sanitize a standalone SVG image document in place (the rules of inline SVG);
    ``InvalidBook`` when its root is not SVG's ``svg``."""
    if root.tag != f"{{{SVG_NS}}}svg":
        raise InvalidBook(f"{path} is not an SVG document")
    _Tree(_Policy(path, shipped)).clean(root)


def clean_css(text: str, path: str, shipped: Shipped) -> str:
    """A stylesheet's text (``path``: the CSS file's package-relative path, which ``url()``
    resolves against) with what is not allowed removed."""
    return _Policy(path, shipped).css.stylesheet(text)


def clean_style(text: str, path: str, shipped: Shipped) -> str:
    """A style attribute's declarations (resolved against the document's ``path``), cleaned;
    ``""`` if nothing is left."""
    return _Policy(path, shipped).css.declarations(text)


def _split(name: str) -> tuple[str, str]:
    """A Clark name's namespace ("" for none) and local name."""
    if name.startswith("{"):
        namespace, _, local = name[1:].partition("}")
        return namespace, local
    return "", name


def _drop(node: etree._Element, text: str = "") -> None:
    """Remove ``node`` from its parent, ``text`` and its tail left in its place."""
    parent = node.getparent()
    if parent is None:
        return
    kept = text + (node.tail or "")
    previous = node.getprevious()
    if kept and previous is not None:
        previous.tail = (previous.tail or "") + kept
    elif kept:
        parent.text = (parent.text or "") + kept
    parent.remove(node)


def _unwrap(node: etree._Element) -> list[etree._Element]:
    """Replace ``node`` with its text and children (returned), its tail kept after them."""
    parent = node.getparent()
    children = list(node)
    at = parent.index(node)
    previous = node.getprevious()
    if node.text and previous is not None:
        previous.tail = (previous.tail or "") + node.text
    elif node.text:
        parent.text = (parent.text or "") + node.text
    for offset, child in enumerate(children):
        parent.insert(at + offset, child)  # lxml moves the child's tail with it
    _drop(node)
    return children


class _Policy:
    """What a URL may point at, and (``css``) what CSS may say, for one file (``path``) of the package."""

    def __init__(self, path: str, shipped: Shipped) -> None:
        self.path = path
        self.shipped = shipped
        self.css = StyleRules(self.allows, self.ships)

    def allows(self, url: str) -> bool:
        """Whether ``url`` points at a shipped file or at a fragment of this file."""
        target = resolve(self.path, url)
        if target is None:
            return False
        file, _, fragment = target.partition("#")
        return self.shipped(file) or (file == self.path and bool(fragment))

    def ships(self, url: str, suffix: str = "") -> bool:
        """Whether ``url`` points at a shipped file other than this one (whose name ends with
        ``suffix``): what an image or a style sheet must be."""
        target = resolve(self.path, url)
        file = "" if target is None else target.partition("#")[0]
        return file != self.path and file.lower().endswith(suffix) and self.shipped(file)

    def image(self, url: str) -> bool:
        """Whether ``url`` is what an image may show: a shipped file other than this one, or a
        raster image written out in the URL itself (``data:image/jpeg;base64,...``: nothing is
        fetched, and a raster image runs nothing)."""
        return self.ships(url) or _RASTER_DATA.fullmatch(url.strip()) is not None


class _Tree:
    """One document's walk: each node judged once, parents before children, with a stack."""

    def __init__(self, policy: _Policy) -> None:
        self.policy = policy

    def clean(self, root: etree._Element) -> None:
        """Sanitize ``root`` (XHTML's ``html`` or SVG's ``svg``, which stays) and what is under it."""
        self._judge(root, _split(root.tag)[0])
        stack = list(root)
        while stack:
            node = stack.pop()
            if not isinstance(node.tag, str):  # (parse_xml leaves no entity, comment or PI)
                _drop(node)
                continue
            verdict = self._judge(node, _split(node.getparent().tag)[0])
            if verdict == _REMOVE:
                _drop(node)
            elif verdict == _UNWRAP:
                stack.extend(_unwrap(node))
            else:
                stack.extend(node)

    def _judge(self, node: etree._Element, parent: str) -> str:
        """What becomes of an element under a parent of namespace ``parent``; a kept element's
        attributes are cleaned."""
        namespace, name = _split(node.tag)
        if namespace == XHTML_NS and parent == XHTML_NS:
            return self._html(node, name)
        if namespace == SVG_NS and (parent == SVG_NS or (parent == XHTML_NS and name == "svg")):
            return self._svg(node, name)
        if namespace == MATHML_NS and (parent == MATHML_NS or (parent == XHTML_NS and name == "math")):
            return self._mathml(node, name)
        return _REMOVE

    def _html(self, node: etree._Element, name: str) -> str:
        """The verdict on an XHTML element; when kept, its attributes cleaned."""
        if name in REMOVED:
            return _REMOVE
        if name not in ALLOWED:
            return _UNWRAP
        if name == "meta" and node.get("charset") is None and None in (node.get("name"), node.get("content")):
            return _REMOVE
        if name == "link" and "stylesheet" not in (node.get("rel") or "").lower().split():
            return _REMOVE
        if name == "style":
            self._stylesheet(node)
        allowed = ELEMENT_ATTRIBUTES.get(name, frozenset())
        points = (self.policy.image if name == "img" else
                  self.policy.ships if name in _REQUIRED_URL else self.policy.allows)
        for key in list(node.attrib):
            value = node.attrib[key]
            if not _html_attribute(key, allowed, name == "html"):
                del node.attrib[key]
            elif key == "style":
                self._style(node, value)
            elif key in _URL_ATTRIBUTES and not points(value):
                del node.attrib[key]
        required = _REQUIRED_URL.get(name)
        return _REMOVE if required is not None and node.get(required) is None else _KEEP

    def _svg(self, node: etree._Element, name: str) -> str:
        """The verdict on an SVG element; when kept, its attributes cleaned."""
        if name not in SVG_ELEMENTS:
            return _REMOVE
        if name == "style":
            self._stylesheet(node)
        points = self.policy.image if name == "image" else self.policy.allows
        for key in list(node.attrib):
            value = node.attrib[key]
            namespace, local = _split(key)
            if local.lower().startswith("on") or (namespace and key not in SVG_NS_ATTRIBUTES):
                del node.attrib[key]
            elif key == "style":
                self._style(node, value)
            elif not (points(value) if local == "href" else self.policy.css.value(value)):
                del node.attrib[key]
        if name == "image" and node.get("href") is None and node.get(f"{{{XLINK_NS}}}href") is None:
            return _REMOVE
        return _KEEP

    def _mathml(self, node: etree._Element, name: str) -> str:
        """The verdict on a MathML element; when kept, its attributes cleaned."""
        if name == "annotation-xml":
            return _REMOVE
        for key in list(node.attrib):
            value = node.attrib[key]
            namespace, local = _split(key)
            if (local.lower().startswith("on") or local in ("href", "src")
                    or (namespace and key != f"{{{XML_NS}}}lang")):
                del node.attrib[key]
            elif key == "style":
                self._style(node, value)
            elif not (self.policy.ships(value) if local == "altimg" else self.policy.css.value(value)):
                del node.attrib[key]
        return _KEEP

    def _style(self, node: etree._Element, value: str) -> None:
        """A style attribute cleaned, or removed when nothing is left of it."""
        cleaned = self.policy.css.declarations(value)
        if cleaned:
            node.set("style", cleaned)
        else:
            del node.attrib["style"]

    def _stylesheet(self, node: etree._Element) -> None:
        """A style element's text cleaned (anything else inside it removed)."""
        text = "".join(node.itertext())
        for child in list(node):
            node.remove(child)
        node.text = self.policy.css.stylesheet(text)


def _html_attribute(key: str, allowed: frozenset[str], root: bool) -> bool:
    """Whether an XHTML element keeps an attribute (``allowed``: its own; ``root``: it is ``html``)."""
    namespace, local = _split(key)
    if local.lower().startswith("on"):
        return False
    if namespace:
        return key in NS_ATTRIBUTES or (root and key == _EPUB_PREFIX)
    return local in GLOBAL_ATTRIBUTES or local.startswith("aria-") or local in allowed
