"""The commands that talk to a running service about one task: ``submit``, ``status``, ``fetch``
(and the request options ``say`` shares)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tts_queue.cli.flags import add_flags
from tts_queue.settings import Settings

if TYPE_CHECKING:
    from tts_queue.cli.flags import Subcommands


def cmd_submit(args: argparse.Namespace, settings: Settings) -> int:
    """Submit text to a running service; with --wait, wait and download."""
    from tts_queue.cli.client import Client

    client = Client.of(settings)
    text = sys.stdin.read() if args.text == "-" else args.text
    task = client.submit(text, voice=args.voice, speaker=args.speaker, format=args.format,
                         speed=args.speed, normalize=args.normalize, text_type=args.text_type)
    if args.output:
        task = client.wait(task["task_id"])
        if task["status"] != "done":
            print(json.dumps(task, indent=2))
            return 1
        client.fetch(task["task_id"], Path(args.output))
        print(f"wrote {args.output}", file=sys.stderr)
    print(json.dumps(task, indent=2))
    return 0


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """Show a task; with --wait, wait until it finishes."""
    from tts_queue.cli.client import Client

    client = Client.of(settings)
    task = client.wait(args.task_id) if args.wait else client.status(args.task_id)
    print(json.dumps(task, indent=2))
    return 0 if task["status"] != "failed" else 1


def cmd_fetch(args: argparse.Namespace, settings: Settings) -> int:
    """Wait for a task and download its audio."""
    from tts_queue.cli.client import Client

    client = Client.of(settings)
    task = client.wait(args.task_id)
    if task["status"] != "done":
        print(json.dumps(task, indent=2))
        return 1
    size = client.fetch(args.task_id, Path(args.output))
    print(f"wrote {args.output} ({size} bytes, {task.get('duration_s')} s)", file=sys.stderr)
    return 0


def add_request_options(parser: argparse.ArgumentParser) -> None:
    """The request options shared by ``say`` and ``submit``."""
    parser.add_argument("text", help="the text, or - to read standard input")
    parser.add_argument("--voice", help="voice id or alias (default: the default voice)")
    parser.add_argument("--speaker", help="speaker name or number (multi-speaker voices)")
    parser.add_argument("--format", choices=["wav", "flac", "ogg", "mp3", "opus", "aac"], help="default: wav")
    parser.add_argument("--speed", type=float, help="1.0 is normal; 1.5 is faster")
    parser.add_argument("--no-normalize", dest="normalize", action="store_false", default=None,
                        help="read the text as written (it is already in spoken form)")
    parser.add_argument("--ssml", dest="text_type", action="store_const", const="ssml",
                        help="the text is SSML (also when it starts with <speak>)")


def add_task_commands(sub: Subcommands) -> None:
    """Commands that talk to a running service over HTTP."""
    submit = sub.add_parser("submit", help="submit text to a running service")
    add_request_options(submit)
    submit.add_argument("-o", "--output", help="wait and write the audio here")
    status = sub.add_parser("status", help="show a task's status")
    status.add_argument("--wait", action="store_true", help="wait until it finishes")
    fetch = sub.add_parser("fetch", help="wait for a task and download its audio")
    fetch.add_argument("-o", "--output", required=True)
    for parser, func in ((submit, cmd_submit), (status, cmd_status), (fetch, cmd_fetch)):
        add_flags(parser, "client.api_url", "client.api_key")
        if parser is not submit:
            parser.add_argument("task_id")
        parser.set_defaults(func=func)
