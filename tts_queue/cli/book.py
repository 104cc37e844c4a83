"""``tts-queue book``: render a whole book through a running service, with a live progress bar.

``book chapters BOOK`` lists the chapters locally (numbers for ``--chapters``); ``book render``
uploads, shows progress (``parsing`` while a worker reads the book) and downloads chapter audio,
captions, ``manifest.json``, (``--m4b``) the M4B and (``--epub``) the read-along EPUB into
``--out``, only ever inside it; ``book status``, ``book fetch``, ``book cancel`` and ``book
delete`` work on a book later.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tts_queue.cli.client import Client
from tts_queue.settings import Settings

if TYPE_CHECKING:
    from tts_queue.books.progress import BookProgress
    from tts_queue.cli.flags import Subcommands

FINISHED = ("done", "failed", "cancelled")
UNSAFE_NAME = re.compile(r'[\\/:*?"<>|\x00-\x1f]+')


def cmd_chapters(args: argparse.Namespace, settings: Settings) -> int:
    """Print the chapters of a book file, numbered as ``--chapters`` takes them."""
    from tts_queue.books.sources.parse import parse_book

    path = Path(args.book)
    book = parse_book(path.read_bytes(), path.name, args.input_format, args.split_pattern,
                      max_bytes=settings.books.max_bytes)
    print(f"{book.title}" + (f" by {book.author}" if book.author else ""))
    for chapter in book.chapters:
        print(f"{chapter.number:3}  {chapter.title}  ({chapter.word_count} words)")
    return 0


def cmd_render(args: argparse.Namespace, settings: Settings) -> int:
    """Upload a book, follow its progress, download what it made."""
    client = Client.of(settings, timeout=600)
    path = Path(args.book)
    options = {"voice": args.voice, "speaker": args.speaker, "speed": args.speed, "format": args.format,
               "chapters": args.chapters, "input_format": args.input_format,
               "split_pattern": args.split_pattern, "normalize": "false" if args.no_normalize else None}
    created = client.create_book(path, {k: v for k, v in options.items() if v is not None})
    book_id = created["book_id"]
    if args.detach:
        print(book_id)
        return 0
    print(f"book {book_id}", file=sys.stderr)
    return follow_and_download(client, book_id, Path(args.out), args.m4b, args.epub)


def follow_and_download(client: Client, book_id: str, out: Path, m4b: bool, epub: bool = False) -> int:
    """Wait for a book with the progress bar, then download it; exit code 1 unless it is done."""
    book = follow(client, book_id)
    if book["status"] != "done":
        print(json.dumps(book, indent=2))
        return 1
    download(client, book, out, m4b, epub)
    return 0


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """Print a book's status document."""
    book = Client.of(settings).book(args.book_id)
    print(json.dumps(book, indent=2))
    return 1 if book["status"] == "failed" else 0


def cmd_fetch(args: argparse.Namespace, settings: Settings) -> int:
    """Wait for a book to finish, then download it."""
    return follow_and_download(Client.of(settings, timeout=600), args.book_id,
                               Path(args.out), args.m4b, args.epub)


def cmd_cancel(args: argparse.Namespace, settings: Settings) -> int:
    """Cancel a book that is still being rendered (a finished one is left alone)."""
    client = Client.of(settings)
    if client.book(args.book_id)["status"] in FINISHED:
        print(f"book {args.book_id} has already finished; `tts-queue book delete` deletes it",
              file=sys.stderr)
        return 1
    book = client.delete_book(args.book_id)
    print(json.dumps({k: book[k] for k in ("book_id", "status")}, indent=2))
    return 0


def cmd_delete(args: argparse.Namespace, settings: Settings) -> int:
    """Delete a book: a finished one with its files; an unfinished one is cancelled."""
    answer = Client.of(settings).delete_book(args.book_id)
    print(json.dumps({k: answer[k] for k in ("book_id", "status")}, indent=2))
    return 0


def progress_line(book: BookProgress, width: int = 30) -> str:
    """One line: a bar, chapters and sentences done, audio seconds, x real time, ETA."""
    total = max(1, book["sentences_total"])
    filled = int(width * book["sentences_done"] / total)
    speed = f"{book['speed_x_realtime']:.1f}x" if book.get("speed_x_realtime") else "-"
    eta = book.get("eta_s")
    eta_text = f"{int(eta // 60)}m{int(eta % 60):02d}s" if eta is not None else "-"
    return (f"[{'#' * filled}{'.' * (width - filled)}] chapters {book['chapters_done']}/"
            f"{book['chapters_total']}  sentences {book['sentences_done']}/{book['sentences_total']}  "
            f"audio {book['audio_seconds']:.0f} s  {speed} real time  ETA {eta_text}")


def follow(client: Client, book_id: str, interval: float = 1.0) -> BookProgress:
    """Poll a book until it finishes, drawing the progress line on stderr."""
    while True:
        book = client.book(book_id)
        sys.stderr.write("\r" + progress_line(book))
        sys.stderr.flush()
        if book["status"] in FINISHED:
            sys.stderr.write("\n")
            return book
        time.sleep(interval)


def inside(out: Path, name: object, fallback: str) -> Path:
    """``out / name`` for a file name a server sent, reduced to a plain name inside ``out``: path
    separators, ``..``, leading dots and control characters never take a file elsewhere."""
    text = name if isinstance(name, str) else ""
    clean = UNSAFE_NAME.sub(" ", text.replace("\\", "/").rsplit("/", 1)[-1]).strip(" .")[:200]
    target = out / (clean or fallback)
    if target.resolve().parent != out.resolve():
        target = out / fallback
    return target


def download(client: Client, book: BookProgress, out: Path, m4b: bool, epub: bool = False) -> None:
    """Chapter audio (``NN - Title.ext``), SRT and WebVTT captions, manifest.json, the M4B and the
    read-along EPUB (waiting while the server builds it), all written inside ``out`` whatever
    names the server gives."""
    out.mkdir(parents=True, exist_ok=True)
    manifest = client.get_json(f"/v1/books/{book['book_id']}/manifest")
    for chapter in manifest["chapters"]:
        number = int(chapter["number"])
        name = inside(out, chapter.get("file"), f"{number:02d}.{manifest.get('format', 'audio')}")
        base = f"/v1/books/{book['book_id']}/chapters/{chapter['number']}"
        client.download(f"{base}/audio", name)
        client.download(f"{base}/captions.srt", name.with_suffix(".srt"))
        client.download(f"{base}/captions.vtt", name.with_suffix(".vtt"))
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False), encoding="utf-8")
    if m4b:
        title = manifest.get("title") if isinstance(manifest.get("title"), str) else ""
        client.download(f"/v1/books/{book['book_id']}/audiobook.m4b", inside(out, f"{title}.m4b", "book.m4b"))
    if epub:
        title = manifest.get("title") if isinstance(manifest.get("title"), str) else ""
        client.download_when_built(f"/v1/books/{book['book_id']}/readalong.epub",
                                   inside(out, f"{title}.epub", "book.epub"))
    print(f"wrote {len(manifest['chapters'])} chapter(s) to {out}", file=sys.stderr)


def add_book_commands(sub: Subcommands, add_api_flag: Callable[[argparse.ArgumentParser], None]) -> None:
    """The ``book`` command group."""
    book = sub.add_parser("book", help="render whole books (EPUB, text, Markdown) through a service")
    books = book.add_subparsers(dest="book_command", required=True)
    chapters = books.add_parser("chapters", help="list a book's chapters (no service needed)")
    render = books.add_parser("render", help="upload, render and download a book")
    for parser in (chapters, render):
        parser.add_argument("book", help="an .epub, .txt or .md file")
        parser.add_argument("--input-format", dest="input_format", choices=["epub", "text", "markdown"])
        parser.add_argument("--split-pattern", dest="split_pattern",
                            help="regex of chapter heading lines (text and Markdown)")
    chapters.set_defaults(func=cmd_chapters)
    render.add_argument("--out", required=True, help="directory for the chapter files")
    render.add_argument("--voice")
    render.add_argument("--speaker")
    render.add_argument("--speed", type=float)
    render.add_argument("--no-normalize", action="store_true", help="read the text as written")
    render.add_argument("--format", choices=["mp3", "opus", "wav", "flac", "aac"], help="default: mp3")
    render.add_argument("--chapters", help="e.g. 2-5 or 1,3 (numbers from `book chapters`)")
    render.add_argument("--m4b", action="store_true", help="also download one M4B with chapter marks")
    render.add_argument("--epub", action="store_true",
                        help="also download the read-along EPUB 3 (text highlighted as it is read)")
    render.add_argument("--detach", action="store_true", help="print the book id and return")
    render.set_defaults(func=cmd_render)
    status = books.add_parser("status", help="show a book's progress")
    fetch = books.add_parser("fetch", help="wait for a book and download it")
    fetch.add_argument("--out", required=True)
    fetch.add_argument("--m4b", action="store_true", help="also download one M4B with chapter marks")
    fetch.add_argument("--epub", action="store_true",
                       help="also download the read-along EPUB 3 (text highlighted as it is read)")
    cancel = books.add_parser("cancel", help="cancel a book that is still rendering")
    delete = books.add_parser("delete", help="delete a book and its files (an unfinished one is cancelled)")
    commands = ((status, cmd_status), (fetch, cmd_fetch), (cancel, cmd_cancel), (delete, cmd_delete))
    for parser, func in commands:
        parser.add_argument("book_id")
        parser.set_defaults(func=func)
    for parser in (render, status, fetch, cancel, delete):
        add_api_flag(parser)
