"""``tts-queue book``: what a server says never takes a file outside ``--out``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tts_queue.cli.book import download, inside


class HostileServer:
    """A client whose manifest names files with path tricks; downloads record where they went."""

    def __init__(self, names: list[Any], title: Any) -> None:
        self.names, self.title = names, title
        self.written: list[Path] = []

    def get_json(self, path: str) -> dict[str, Any]:
        chapters = [{"number": n, "file": name} for n, name in enumerate(self.names, start=1)]
        return {"title": self.title, "format": "mp3", "chapters": chapters}

    def download(self, path: str, output: Path) -> int:
        output.write_bytes(b"audio")
        self.written.append(output)
        return 5


@pytest.mark.parametrize("name", [
    "../../escaped.mp3", "/etc/passwd", "..\\..\\windows.mp3", "sub/dir/x.mp3", "..", ".", "",
    "\x00evil.mp3", None, 42, "a" * 5000,
])
def test_a_servers_file_names_stay_inside_out(tmp_path: Path, name: Any) -> None:
    # Given an output directory inside a bigger one
    out = tmp_path / "out"
    out.mkdir()
    # When a server's file name is made a path there
    target = inside(out, name, "01.mp3")
    # Then it is a plain file directly inside the output directory
    assert target.parent.resolve() == out.resolve() and target.name not in ("", ".", "..")


def test_book_fetch_writes_only_inside_out(tmp_path: Path) -> None:
    # Given a hostile server's manifest (its chapter names and title try to climb out)
    out = tmp_path / "deep" / "out"
    server = HostileServer(["../../../x.mp3", "/tmp/abs.mp3", "ok.mp3"], "../../../../book")
    # When the book is downloaded with its M4B
    download(server, {"book_id": "b"}, out, m4b=True)  # type: ignore[arg-type, typeddict-item]
    # Then every file, captions and manifest included, lies directly inside --out
    written = [*server.written, out / "manifest.json"]
    assert len(server.written) == 3 * 3 + 1
    assert all(path.resolve().parent == out.resolve() for path in written)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in written)
    assert not list(tmp_path.glob("*.mp3")) and not list((tmp_path / "deep").glob("*.m4b"))
