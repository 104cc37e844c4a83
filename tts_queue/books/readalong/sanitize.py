"""The allowlist a source EPUB's content passes before it goes into a read-along EPUB: its XHTML
content documents (with inline SVG and MathML), its SVG images and its style sheets.

What is kept is what EPUB 3 allows and nothing that runs or fetches:

- XHTML: the HTML5 elements EPUB 3 allows, with their own attributes and the global ones
  (``hidden`` among them: a hidden landmarks list stays hidden);
  scripts, frames, plug-ins, forms, media and the like are removed with their content, other
  elements (EPUB 2's ``center``, ``font``) unwrapped, their text kept in place;
- SVG: shapes, text, gradients, patterns, masks and simple filters; no script, no
  ``foreignObject``, no animation; MathML without ``annotation-xml``; any other namespace's
  elements are removed; attribute names are compared without case (``HREF``, ``Style`` go);
- CSS: ``sanitize_css``'s rules, with this module's URL policy;
- every URL (an attribute, a ``url()``, an ``@import``) resolves (``resolve``) to a shipped file
  of the kind it may load (``Shipped``: a link a content document, a stylesheet link or
  ``@import`` a style sheet, an image an image, a ``url()`` an image or a font), or to a fragment
  of its own document, and is written again pointing at that file's shipped name (``media``); a
  URL that is remote, has a scheme (``javascript:``, ``data:``...), is absolute, climbs out of the
  package or points at anything else goes, and with it an image, a stylesheet link, a declaration
  or an ``@import``; a link keeps its text. The one URL with a scheme kept is an image's raster
  ``data:`` URL whose bytes are of its type (PNG, JPEG, GIF, WebP in base64: nothing fetched,
  nothing run), as covers often embed their picture so;
- a document whose root is not XHTML's ``html`` (SVG's ``svg``) is refused with ``InvalidBook``.

Bounds: ``tree.parse_xml`` (no DTD, no entity, no network, at most ``MAX_ATTRIBUTES`` on an
element); the tree is walked once with an explicit stack, each node judged once, and each
element's children rewritten in one pass (``tree.splice``): linear in the document.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from urllib.parse import unquote

from lxml import etree

from tts_queue.books.readalong.media import Kind, raster_data
from tts_queue.books.readalong.sanitize_css import StyleRules
from tts_queue.books.readalong.tree import (
    KEEP,
    MATHML_NS,
    OPS_NS,
    REMOVE,
    SVG_NS,
    UNWRAP,
    XHTML_NS,
    XLINK_NS,
    XML_NS,
    Judge,
    splice,
)
from tts_queue.errors import InvalidBook

# A package-relative path's kind and the path it ships under, when it is shipped.
Shipped = Callable[[str], tuple[Kind, str] | None]
LINKED = frozenset({Kind.DOCUMENT})  # what a link (and a citation) may point at
IMAGES = frozenset({Kind.IMAGE})
STYLES = frozenset({Kind.STYLE})

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

_EDGES = "".join(chr(n) for n in range(0x21))  # C0 controls and space: stripped from a URL's ends
_INSIDE = str.maketrans("", "", "\t\n\r")  # removed anywhere in a URL, as browsers do
_FIRST_SEGMENT = re.compile(r"[/?#]")
# Attribute names with a meaning of their own in SVG and MathML: compared without case, so a name
# that is one of them in another case (``HREF``, which an HTML parser reads as ``href``) goes.
_MEANINGFUL = frozenset({"href", "src", "style", "altimg", "cite", "action", "formaction", "data",
                         "poster", "background", "srcset", "definitionurl"})


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


class _Policy:
    """Where a URL in one file (``path``) of the package may point, and (``css``) what CSS may say."""

    def __init__(self, path: str, shipped: Shipped) -> None:
        self.path = path
        self.shipped = shipped
        entry = shipped(path)
        self.home = posixpath.dirname(entry[1] if entry is not None else path) or "."  # where it ships
        self.css = StyleRules(self.point)

    def point(self, url: str, kinds: frozenset[Kind], here: bool) -> str | None:
        """``url`` written again to point at the shipped name of the file it resolves to, when
        that file is shipped as one of ``kinds`` (``here``: or it is a fragment of this file, or
        this file itself); ``None`` when it may not point there."""
        target = resolve(self.path, url)
        if target is None:
            return None
        file, _, fragment = target.partition("#")
        suffix = f"#{fragment}" if fragment else ""
        if file == self.path and not here:
            return None
        if file == self.path and fragment:
            return suffix
        entry = self.shipped(file)
        if entry is None or entry[0] not in kinds:
            return None
        return posixpath.relpath(entry[1], self.home) + suffix

    def image(self, url: str) -> str | None:
        """``url`` where an image may show it: a shipped image other than this file, or a raster
        image written out in the URL itself (``data:image/jpeg;base64,...``, its bytes of that
        type: nothing is fetched, and a raster image runs nothing)."""
        return url.strip() if raster_data(url) else self.point(url, IMAGES, False)


class _Tree:
    """One document's walk: each element judged once, parents before children, with a stack;
    each kept element's children rewritten in one pass (``splice``)."""

    def __init__(self, policy: _Policy) -> None:
        self.policy = policy

    def clean(self, root: etree._Element) -> None:
        """Sanitize ``root`` (XHTML's ``html`` or SVG's ``svg``, which stays) and what is under it."""
        self._judge(root, _split(root.tag)[0])
        stack = [root]
        while stack:
            parent = stack.pop()
            stack.extend(splice(parent, self._judging(_split(parent.tag)[0])))

    def _judging(self, parent: str) -> Judge:
        """What becomes of each child of an element of namespace ``parent`` (``parse_xml`` leaves
        no entity, comment or PI: any other goes)."""

        def judge(node: etree._Element) -> tuple[str, str]:
            return (self._judge(node, parent) if isinstance(node.tag, str) else REMOVE), ""

        return judge

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
        return REMOVE

    def _html(self, node: etree._Element, name: str) -> str:
        """The verdict on an XHTML element; when kept, its attributes cleaned."""
        if name in REMOVED:
            return REMOVE
        if name not in ALLOWED:
            return UNWRAP
        if name == "meta" and node.get("charset") is None and None in (node.get("name"), node.get("content")):
            return REMOVE
        if name == "link" and "stylesheet" not in (node.get("rel") or "").lower().split():
            return REMOVE
        if name == "style":
            self._stylesheet(node)
        allowed = ELEMENT_ATTRIBUTES.get(name, frozenset())
        for key in list(node.attrib):
            value = node.attrib[key]
            if not _html_attribute(key, allowed, name == "html"):
                del node.attrib[key]
            elif key == "style":
                self._style(node, value)
            elif key in _URL_ATTRIBUTES:
                self._url(node, key, self.policy.image(value) if name == "img" else
                          self.policy.point(value, STYLES, False) if name == "link" else
                          self.policy.point(value, LINKED, True))
        required = _REQUIRED_URL.get(name)
        return REMOVE if required is not None and node.get(required) is None else KEEP

    def _svg(self, node: etree._Element, name: str) -> str:
        """The verdict on an SVG element; when kept, its attributes cleaned."""
        if name not in SVG_ELEMENTS:
            return REMOVE
        if name == "style":
            self._stylesheet(node)
        for key in list(node.attrib):
            value = node.attrib[key]
            namespace, local = _split(key)
            lower = local.lower()
            if (lower.startswith("on") or (namespace and key not in SVG_NS_ATTRIBUTES)
                    or (lower in _MEANINGFUL and local not in ("href", "style"))):
                del node.attrib[key]
            elif key == "style":
                self._style(node, value)
            elif local == "href":
                self._url(node, key, self.policy.image(value) if name == "image" else
                          self.policy.point(value, LINKED if name == "a" else IMAGES, True))
            else:
                self._url(node, key, self.policy.css.value(value))
        if name == "image" and node.get("href") is None and node.get(f"{{{XLINK_NS}}}href") is None:
            return REMOVE
        return KEEP

    def _mathml(self, node: etree._Element, name: str) -> str:
        """The verdict on a MathML element; when kept, its attributes cleaned."""
        if name == "annotation-xml":
            return REMOVE
        for key in list(node.attrib):
            value = node.attrib[key]
            namespace, local = _split(key)
            lower = local.lower()
            if (lower.startswith("on") or (namespace and key != f"{{{XML_NS}}}lang")
                    or (lower in _MEANINGFUL and key not in ("style", "altimg"))):
                del node.attrib[key]
            elif key == "style":
                self._style(node, value)
            else:
                written = self.policy.image(value) if key == "altimg" else self.policy.css.value(value)
                self._url(node, key, written)
        return KEEP

    @staticmethod
    def _url(node: etree._Element, key: str, written: str | None) -> None:
        """An attribute written again as ``written``, or removed when that is ``None``."""
        if written is None:
            del node.attrib[key]
        elif written != node.attrib[key]:
            node.set(key, written)

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
