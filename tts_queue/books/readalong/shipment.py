"""The files of a kept EPUB upload that go into its read-along EPUB (``plan``): its spine documents,
navigation document, style sheets, images and fonts, each under the name ``media`` chooses.

A file ships only when its declared media type is one that ships, its bytes are of that type
(``media.format_of``; an SVG image also parses as SVG), it is inside the package, and it is not an
obfuscated font (it would need ``META-INF/encryption.xml``) nor a document that holds only chapters
left out. A file that does not ship is left out with every link to it (``sanitize``).
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from tts_queue.books.readalong.media import DOCUMENT_TYPE, SVG_TYPE, TYPES, Kind, format_of, shipped_name
from tts_queue.books.readalong.textmarks import XHTML, local
from tts_queue.books.readalong.tree import SVG_NS, parse_xml
from tts_queue.errors import BookError

if TYPE_CHECKING:
    from ebooklib.epub import EpubBook

_OPS = "{http://www.idpf.org/2007/ops}"


@dataclass(frozen=True)
class Item:
    """One file of the source that goes into the EPUB: where the source has it, and its name there."""

    path: str  # package-relative, decoded: what the source's URLs resolve to
    media_type: str
    content: bytes
    name: str  # package-relative: where it ships
    cover: bool = False

    @property
    def kind(self) -> Kind:
        """What it is, so what may point at it."""
        return TYPES[self.media_type][0]


@dataclass(frozen=True)
class Plan:
    """What of a source ships: the navigation document's path (``None``: none to keep), the
    items, and the spine (documents' paths, each with whether it is linear)."""

    nav: str | None
    items: list[Item]
    spine: dict[str, bool]


def package_path(name: str) -> str:
    """An item's package-relative path as the read-along EPUB names it: its manifest href as
    ebooklib gives it (percent-escapes already decoded, so never decoded twice), normalized."""
    return posixpath.normpath(name)


def plan(package: EpubBook, left_out: set[str]) -> Plan:
    """The items of ``package`` that ship (none of ``left_out``), named, and its spine."""
    from ebooklib import epub

    # EPUB 2 names its cover <meta name="cover" content="ID"/>: ebooklib files it under "cover" or
    # under "meta", by how the package declares its namespaces
    named = package.get_metadata("OPF", "cover") + package.get_metadata("OPF", "meta")
    cover_ids = {str(attrs.get("content")) for _, attrs in named if attrs.get("name") == "cover"}
    by_id: dict[str, Item] = {}
    items: dict[str, Item] = {}
    nav: str | None = None
    for source in package.get_items():
        path = package_path(source.get_name())
        media_type = str(source.media_type or "")
        if media_type not in TYPES or path.startswith(("../", "/")) or path in left_out:
            continue
        if path in items:  # a second manifest entry of one file: the spine may name either
            by_id.setdefault(source.get_id(), items[path])
            continue
        content = source.content  # as stored
        extension = format_of(content, media_type)
        if extension is None or (media_type == SVG_TYPE and not _is_svg(content)):
            continue  # its bytes are not what its type says
        cover = isinstance(source, epub.EpubCover) or source.get_id() in cover_ids
        item = Item(path, media_type, content, shipped_name(media_type, extension, len(items) + 1),
                    cover and media_type.startswith("image/"))
        if isinstance(source, epub.EpubNav) and _has_toc(item):
            nav = path
        items[path] = by_id[source.get_id()] = item
    spine: dict[str, bool] = {}
    for idref, linear in package.spine:
        listed = by_id.get(idref)
        if listed is not None and listed.media_type == DOCUMENT_TYPE:
            spine.setdefault(listed.path, linear != "no")
    kept = [i for i in items.values() if i.media_type != DOCUMENT_TYPE or i.path in spine or i.path == nav]
    return Plan(nav, kept, spine)


def _is_svg(content: bytes) -> bool:
    """Whether an image's bytes parse as an SVG document."""
    try:
        return str(parse_xml(content).tag) == f"{{{SVG_NS}}}svg"
    except BookError:
        return False


def _has_toc(item: Item) -> bool:
    """Whether a navigation document has its table of contents."""
    try:
        root = parse_xml(item.content)
    except BookError:
        return False
    return any("toc" in n.get(f"{_OPS}type", "").split() for n in root.iter(f"{XHTML}nav"))


def obfuscated(data: bytes) -> set[str]:
    """Package-relative paths of what ``META-INF/encryption.xml`` encrypts (obfuscated fonts): they
    would need that file, so they are left out."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        names = set(archive.namelist())
        if "META-INF/encryption.xml" not in names:
            return set()
        container = parse_xml(archive.read("META-INF/container.xml"))
        encryption = parse_xml(archive.read("META-INF/encryption.xml"))
    rootfile = next((e.get("full-path", "") for e in container.iter() if local(e) == "rootfile"), "")
    base = posixpath.dirname(rootfile)
    return {posixpath.relpath(posixpath.normpath(unquote(str(e.get("URI", "")))), base or ".")
            for e in encryption.iter() if local(e) == "CipherReference"}
