"""The ``tts-queue`` command: synthesize locally, list voices, run the service, talk to it."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from tts_queue.cli.book import add_book_commands
from tts_queue.cli.flags import add_flags, apply_flags
from tts_queue.cli.key_commands import add_key_commands
from tts_queue.cli.service_commands import add_service_commands
from tts_queue.cli.task_commands import add_request_options, add_task_commands
from tts_queue.cli.voice_commands import add_voice_commands
from tts_queue.errors import TTSQueueError
from tts_queue.settings import Settings

if TYPE_CHECKING:
    from tts_queue.cli.flags import Subcommands
    from tts_queue.wiring.root import Wiring


def _settings(env: Mapping[str, str], args: argparse.Namespace) -> Settings:
    return apply_flags(Settings.from_env(env), args)


def cmd_say(args: argparse.Namespace, settings: Settings) -> int:
    """Synthesize text to a file with the core, no service needed."""
    from tts_queue.storage.local import write_atomic
    from tts_queue.synthesis.encoder import encode
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.formats import check_format
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request
    from tts_queue.synthesis.synthesizer import Synthesizer

    text = sys.stdin.read() if args.text == "-" else args.text
    output = Path(args.output)
    fmt = args.format or output.suffix.lstrip(".") or "wav"  # default: from -o's suffix
    payload = {"text": text, "voice": args.voice, "speaker": args.speaker,
               "format": check_format(fmt), "speed": args.speed, "normalize": args.normalize,
               "text_type": args.text_type}
    registry = VoiceRegistry.from_settings(settings)
    request = build_request({k: v for k, v in payload.items() if v is not None}, registry, settings)
    engine = BatchEngine.for_pool(registry, settings, "cpu").start()
    started = time.perf_counter()
    try:
        result = Synthesizer(registry, engine).synthesize(request)
    finally:
        engine.stop()
    elapsed = time.perf_counter() - started
    write_atomic(output, encode(result.audio, request.format))
    print(f"wrote {output} ({result.audio.duration_s:.2f} s of audio, {result.sentences} sentence(s), "
          f"{elapsed:.2f} s to synthesize)", file=sys.stderr)
    return 0


def cmd_settings(args: argparse.Namespace, settings: Settings) -> int:
    """Print every TTS_* variable with its default (or, with --current, its value here)."""
    from tts_queue.settings import describe, markdown_table

    if args.markdown:
        print(markdown_table())
        return 0
    values = {leaf.variable: leaf.default for leaf in describe()}
    if args.current:
        from tts_queue.redact import redacted
        from tts_queue.settings import current_values

        # URLs print without their passwords (and secret query parameters): this output lands
        # in terminals, tickets and container logs
        secret = {info.variable for info in describe() if info.secret}
        values = {name: ("***" if value and name in secret else redacted(value))
                  for name, value in current_values(settings).items()}
    for info in describe():
        print(f"{info.variable:32} {values[info.variable]:28} {info.doc}")
    return 0


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    """Apply database migrations (compose runs this, so what it prints lands in container logs:
    the URL without its password, and a failure as one line with any secret masked)."""
    from tts_queue.migrate import upgrade
    from tts_queue.redact import redacted

    url = settings.database_url
    where = redacted(url)
    try:
        upgrade(url)
    except Exception as exc:  # a driver's text (or traceback) may quote the URL it was given
        if args.verbose:
            import traceback

            print(_masked(traceback.format_exc(), url), file=sys.stderr)
        print(f"error [migration_failed]: the database at {where} could not be migrated: "
              f"{_masked(f'{type(exc).__name__}: {exc}', url)}", file=sys.stderr)
        return 2
    print(f"database at {where} is up to date", file=sys.stderr)
    return 0


def _masked(text: str, url: str) -> str:
    """``text`` with URL passwords masked, and ``url``'s own password wherever it appears."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from tts_queue.redact import redacted

    text = redacted(text)
    try:
        password = make_url(url).password
    except (ArgumentError, ValueError):
        password = None
    return text.replace(str(password), "***") if password else text


def _wiring(settings: Settings) -> Wiring:
    """The core over a migrated database, for commands that change rows but queue no work (a due
    callback or a complete chapter is left to the sweep)."""
    from tts_queue.broker.watch import NoWatch, RedisWatch
    from tts_queue.migrate import upgrade
    from tts_queue.tasks.dispatcher import NoQueue
    from tts_queue.wiring.root import Wiring

    upgrade(settings.database_url)
    watch = RedisWatch.from_settings(settings) if settings.services.redis_url else NoWatch()
    return Wiring.build(settings, NoQueue(), watch)


def cmd_cleanup(args: argparse.Namespace, settings: Settings) -> int:
    """Run the retention cleanup now (or, with --dry-run, print what it would remove)."""
    from tts_queue.cli.flags import parse_duration

    older = parse_duration(args.older_than) if args.older_than else None
    wiring = _wiring(settings)
    report = wiring.cleaner().run(older_than=older, dry_run=args.dry_run)
    if not report.skipped:  # books nobody read for TTS_BOOK_TTL_DAYS, unless kept
        ttl = timedelta(days=settings.books.ttl_days)
        report.books = len(wiring.book_rows.stale(ttl)) if report.dry_run else wiring.books.expire(ttl)
    if args.json:
        print(json.dumps(report.as_json(), indent=2))
        return 0
    if report.skipped:
        print(f"nothing done: {report.skipped}")
        return 1
    verb = "would remove" if report.dry_run else "removed"
    print(f"{verb} {report.entries} cache entries ({report.bytes} bytes) and {report.task_rows} task rows")
    if report.dry_run:
        print(f"last access of those entries: oldest {report.oldest_access}, newest {report.newest_access}")
    else:
        print(f"expired {report.expired_by_age} by age and {report.expired_by_pressure} by pressure "
              f"({report.pressure_reason or 'no pressure'}); they are deleted after "
              f"TTS_DELETE_GRACE_S={settings.cache.delete_grace_s:.0f} s")
        print("drift repaired: " + ", ".join(f"{k} {v}" for k, v in report.drift.items()))
    print(f"books {'that would be' if report.dry_run else ''} deleted, unread for "
          f"{settings.books.ttl_days:g} days: {report.books}")
    print(f"pinned entries kept: {report.pinned}")
    return 0


def cmd_cache_stats(args: argparse.Namespace, settings: Settings) -> int:
    """Print the cache's entries, bytes, hits, misses, hit ratio, pinned entries and last cleanup."""
    from tts_queue.db import Database
    from tts_queue.migrate import upgrade
    from tts_queue.storage.stats import cache_stats

    upgrade(settings.database_url)
    print(json.dumps(cache_stats(Database(settings.database_url)), indent=2))
    return 0


def _add_local_commands(sub: Subcommands) -> None:
    """Commands that need no running service."""
    say = sub.add_parser("say", help="synthesize text to an audio file locally")
    add_request_options(say)
    say.add_argument("-o", "--output", default="out.wav", help="output file (default out.wav)")
    say.set_defaults(func=cmd_say)
    add_voice_commands(sub)
    sub.add_parser("migrate", help="apply database migrations").set_defaults(func=cmd_migrate)
    cleanup = sub.add_parser("cleanup", help="delete stale audio and task rows now (retention)")
    add_flags(cleanup, "data_dir")
    cleanup.add_argument("--dry-run", action="store_true", help="print what would go; change nothing")
    cleanup.add_argument("--older-than", dest="older_than",
                         help="audio age to delete, e.g. 7d, 12h, 0s (default TTS_AUDIO_TTL_DAYS)")
    cleanup.add_argument("--json", action="store_true")
    cleanup.set_defaults(func=cmd_cleanup)
    cache = sub.add_parser("cache", help="the content-hash cache")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True)
    stats = cache_sub.add_parser("stats", help="entries, bytes, hits, misses, pinned, last cleanup")
    add_flags(stats, "data_dir")
    stats.set_defaults(func=cmd_cache_stats)
    config = sub.add_parser("settings", help="list every TTS_* variable, its default and what it does")
    config.add_argument("--markdown", action="store_true", help="as a markdown table")
    config.add_argument("--current", action="store_true", help="the values in effect here")
    config.set_defaults(func=cmd_settings)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(prog="tts-queue", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_local_commands(sub)
    add_service_commands(sub)
    add_task_commands(sub)
    add_book_commands(sub, lambda parser: add_flags(parser, "client.api_url", "client.api_key"))
    add_key_commands(sub, lambda parser: add_flags(parser, "data_dir"))
    return parser


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Entry point of the ``tts-queue`` command."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger("alembic").setLevel(logging.WARNING)  # migration chatter is not output
    try:
        settings = _settings(os.environ if env is None else env, args)
        code: int = args.func(args, settings)
        return code
    except TTSQueueError as exc:
        from tts_queue.redact import redacted

        print(f"error [{exc.code}]: {redacted(exc.message)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
