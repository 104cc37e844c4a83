"""Minimal EPUB 3 books built in memory, for the tests of what a book's parsers make of them."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence


def minimal_epub(documents: Sequence[str | bytes], *, repeat: int = 1, reads: int = 1,
                 nav: list[tuple[int, str, str | None]] | None = None) -> bytes:
    """A minimal EPUB 3: mimetype, container, an OPF whose manifest names each document
    ``repeat`` times (every item pointing at the same file) and whose spine reads each ``reads``
    times, and a navigation document when ``nav`` gives ``(document, title, fragment)`` entries."""
    items = "".join(f'<item id="d{i}r{r}" href="d{i}.xhtml" media-type="application/xhtml+xml"/>'
                    for i in range(len(documents)) for r in range(repeat))
    spine = "".join(f'<itemref idref="d{i}r0"/>' * reads for i in range(len(documents)))
    if nav is not None:
        items += '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
    links = "".join(f'<li><a href="d{i}.xhtml{"#" + fragment if fragment else ""}">{title}</a></li>'
                    for i, title, fragment in nav or [])
    opf = ('<?xml version="1.0" encoding="utf-8"?><package xmlns="http://www.idpf.org/2007/opf" '
           'version="3.0" unique-identifier="uid"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
           "<dc:title>Made</dc:title>"
           f'<dc:identifier id="uid">made-1</dc:identifier></metadata><manifest>{items}</manifest>'
           f'<spine>{spine}</spine></package>')
    container = ('<?xml version="1.0"?><container version="1.0" '
                 'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
                 '<rootfile full-path="content.opf" media-type="application/oebps-package+xml"/>'
                 "</rootfiles></container>")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", container)
        archive.writestr("content.opf", opf)
        for index, document in enumerate(documents):
            archive.writestr(f"d{index}.xhtml", document)
        if nav is not None:
            archive.writestr("nav.xhtml", '<html xmlns:epub="http://www.idpf.org/2007/ops"><body>'
                                          f'<nav epub:type="toc"><ol>{links}</ol></nav></body></html>')
    return buffer.getvalue()


def xhtml(body: str) -> str:
    """A content document with ``body``."""
    return f"<html><head><title>t</title></head><body>{body}</body></html>"
