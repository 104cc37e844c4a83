"""An EPUB's zip archive before and while ebooklib reads it: ``check_archive`` rejects what is not
a safe, unencrypted EPUB container (its central directory must say it unpacks within the budget)
before anything is parsed, and ``load_package`` reads the package with every entry through an
``UnpackBudget``: ebooklib reads the same entry once per manifest item that names it, and each
read counts its decompressed bytes, stopping as soon as the total passes the limit.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from typing import TYPE_CHECKING

from bs4 import BeautifulSoup, Tag

from tts_queue.errors import BookError, BookTooLarge, InvalidBook

if TYPE_CHECKING:  # ebooklib ships no annotations: this names its class for the reader
    from ebooklib.epub import EpubBook

MAX_UNCOMPRESSED_BYTES = 512 * 1024 * 1024  # without ``BookLimits``
READ_BLOCK = 64 * 1024
_FONT_OBFUSCATION = ("http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC")


class UnpackBudget:
    """Bytes decompressed out of one EPUB so far, every read counted, against a limit."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def read(self, archive: zipfile.ZipFile, name: str) -> bytes:
        """One entry's bytes, decompressed a block at a time: ``BookTooLarge`` as soon as the total
        passes the limit, so no more than the limit and one block is ever decompressed."""
        blocks: list[bytes] = []
        with archive.open(name) as entry:
            while block := entry.read(min(READ_BLOCK, self.limit - self.used + 1)):
                self.charge(len(block))
                blocks.append(block)
        return b"".join(blocks)

    def charge(self, size: int) -> None:
        """Count ``size`` bytes of work on decompressed data."""
        self.used += size
        if self.used > self.limit:
            raise BookTooLarge(f"the EPUB unpacks to more than {self.limit} bytes")


def check_archive(data: bytes, budget: UnpackBudget | None = None) -> None:
    """Reject what is not a safe, unencrypted EPUB container before parsing it: its central
    directory says what it unpacks to, which must be within the budget before anything is read."""
    budget = budget or UnpackBudget(MAX_UNCOMPRESSED_BYTES)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except Exception as exc:  # BadZipFile, ValueError, struct and size errors on a corrupt directory
        raise InvalidBook(f"not a readable EPUB (corrupt zip archive: {exc})") from exc
    with archive:
        names = set(archive.namelist())
        if "META-INF/container.xml" not in names:
            raise InvalidBook("not an EPUB: the zip archive has no META-INF/container.xml")
        if sum(info.file_size for info in archive.infolist()) > budget.limit:
            raise BookTooLarge(f"the EPUB unpacks to more than {budget.limit} bytes")
        if "META-INF/encryption.xml" not in names:
            return
        try:
            encryption = budget.read(archive, "META-INF/encryption.xml")
        except BookError:
            raise
        except Exception as exc:  # bad CRC, unknown compression, a password...
            raise InvalidBook(f"not a readable EPUB: {type(exc).__name__}: {exc}") from exc
        if _encrypts_text(encryption):
            raise InvalidBook("the EPUB is encrypted (DRM); only DRM-free books can be read")


def _encrypts_text(encryption_xml: bytes) -> bool:
    """Whether encryption.xml covers content documents (font obfuscation alone is harmless)."""
    soup = BeautifulSoup(encryption_xml, "xml")
    for data in soup.find_all("EncryptedData"):
        method = data.find("EncryptionMethod")
        algorithm = str(method.get("Algorithm", "")) if isinstance(method, Tag) else ""
        reference = data.find("CipherReference")
        uri = str(reference.get("URI", "")) if isinstance(reference, Tag) else ""
        if algorithm not in _FONT_OBFUSCATION and uri.lower().endswith((".xhtml", ".html", ".htm")):
            return True
    return False


def load_package(data: bytes, budget: UnpackBudget) -> EpubBook:
    """The ebooklib package, every entry read through ``budget``; a parser failure is ``InvalidBook``."""
    from ebooklib import epub

    class Reader(epub.EpubReader):  # type: ignore[misc]
        """ebooklib's reader, reading entries through the budget instead of ``ZipFile.read``."""

        def read_file(self, name: str) -> bytes:
            """The bytes of one archive entry (``KeyError`` when missing, as ebooklib expects)."""
            return budget.read(self.zf, posixpath.normpath(name))

    try:
        reader = Reader(io.BytesIO(data), options={"ignore_ncx": True})
        package = reader.load()
        reader.process()
        return package
    except BookError:
        raise
    except Exception as exc:  # ebooklib raises KeyError, IndexError, lxml errors... on bad input
        raise InvalidBook(f"not a readable EPUB: {type(exc).__name__}: {exc}") from exc
