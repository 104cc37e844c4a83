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
from typing import TYPE_CHECKING, TypedDict

from tts_queue.cli.book import add_book_commands
from tts_queue.cli.flags import add_flags, apply_flags
from tts_queue.cli.key_commands import add_key_commands
from tts_queue.errors import ConfigError, TTSQueueError
from tts_queue.settings import Settings

if TYPE_CHECKING:
    from tts_queue.cli.flags import Subcommands
    from tts_queue.wiring.root import Wiring


def _settings(env: Mapping[str, str], args: argparse.Namespace) -> Settings:
    return apply_flags(Settings.from_env(env), args)


def cmd_say(args: argparse.Namespace, settings: Settings) -> int:
    """Synthesize text to a file with the core, no service needed."""
    from tts_queue.storage.local import write_atomic
    from tts_queue.synthesis.encoder import check_format, encode
    from tts_queue.synthesis.engine import BatchEngine
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


class VoiceLine(TypedDict):
    """One voice as ``tts-queue voices`` shows it (``--json``: one item of ``voices``)."""

    id: str
    aliases: list[str]
    language: str
    languages: list[str]
    family: str
    sample_rate: int
    speakers: list[str]
    num_speakers: int
    status: str
    source: str
    provider: str | None
    grade: str | None


def cmd_voices(args: argparse.Namespace, settings: Settings) -> int:
    """List the registry's voices and whether their files are present and verified; with
    ``--install NAME``, install a voice pack first."""
    if args.install:
        from tts_queue.cli.install import install_pack

        folder = install_pack(settings, args.install, Path(args.source) if args.source else None)
        print(f"installed the {args.install} voice pack in {folder} (every file checked against its "
              "pinned sha256)", file=sys.stderr)
        if not args.json:
            return 0
    import onnxruntime

    from tts_queue.synthesis.inference import choose_providers
    from tts_queue.synthesis.registry import VoiceRegistry

    registry = VoiceRegistry.from_settings(settings)
    available = onnxruntime.get_available_providers()
    order = choose_providers(settings.onnx.providers, available)
    rows: list[VoiceLine] = []
    for spec in registry.specs():
        status = registry.status(spec)
        provider = "(not loaded; --load)"
        if args.load and status in ("verified", "unverified"):
            provider = registry.load(spec.id).model.provider  # read back from the session
        rows.append({
            "id": spec.id, "aliases": list(spec.aliases), "language": spec.language,
            "languages": list(spec.spoken), "family": spec.family, "sample_rate": spec.sample_rate,
            "speakers": list(spec.speakers),
            "num_speakers": spec.num_speakers, "status": status, "source": spec.source,
            "provider": provider if args.load else None, "grade": spec.grade or None,
        })
    if args.json:
        print(json.dumps({"providers": {"requested": settings.onnx.providers, "available": available,
                                        "order": order}, "voices": rows}, indent=2))
        return 0
    print(f"execution providers: TTS_PROVIDERS={settings.onnx.providers} -> tries {', '.join(order)} "
          f"(available here: {', '.join(available)})")
    print(f"{'voice':20} {'family':7} {'language':8} {'rate':>6} {'speakers':9} {'grade':5} {'status':10} "
          f"{'provider':22} source")
    for row in rows:
        speakers = ", ".join(row["speakers"]) or str(row["num_speakers"])
        provider = row["provider"] or "(--load to see)"
        print(f"{row['id']:20} {row['family']:7} {','.join(row['languages']):8} {row['sample_rate']:>6} "
              f"{speakers:9} {row['grade'] or '-':5} {row['status']:10} {provider:22} {row['source']}")
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


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    """Warn about Redis and database settings that risk tasks; exit code 1 with warnings."""
    from tts_queue.broker.doctor import diagnose, report

    if not args.verbose:
        logging.getLogger("alembic").setLevel(logging.WARNING)  # its INFO lines are not findings
    warnings = diagnose(settings)
    if args.json:
        print(json.dumps({"ok": not warnings, "warnings": [w.as_json() for w in warnings]}, indent=2))
    else:
        print(report(warnings))
    return 1 if warnings else 0


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    """Run API, worker(s), scheduler and (if needed) an embedded Redis."""
    from tts_queue.cli.launcher import up

    return up(settings, workers=args.workers)


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    """Run one worker process for a pool against the configured Redis and database."""
    from tts_queue.cli.launcher import worker_launch

    if not settings.services.redis_url or not settings.services.database_url:
        # A worker with its own SQLite file would find none of the API's tasks.
        raise ConfigError("set TTS_REDIS_URL and TTS_DATABASE_URL (the ones the API uses) to run "
                          "a worker on its own; `tts-queue up` runs one for you")
    command, env = worker_launch(settings, os.environ, args.device)
    os.execve(command[0], command, env)
    return 0  # not reached


def cmd_wyoming(args: argparse.Namespace, settings: Settings) -> int:
    """Run the Wyoming server (Home Assistant's TTS protocol) against the configured Redis and
    database, as a process of its own."""
    from tts_queue.cli.launcher import wyoming_launch

    if not settings.services.redis_url or not settings.services.database_url:
        raise ConfigError("set TTS_REDIS_URL and TTS_DATABASE_URL (the ones the API uses) to run the "
                          "Wyoming server on its own; `tts-queue up --wyoming-port 10200` runs one for you")
    if args.host:
        settings = settings.replace(**{"wyoming.host": args.host})
    command, env = wyoming_launch(settings, os.environ, args.port)
    os.execve(command[0], command, env)
    return 0  # not reached


def cmd_scheduler(args: argparse.Namespace, settings: Settings) -> int:
    """Run the periodic scheduler (stale audio cleanup)."""
    from tts_queue.cli.launcher import scheduler_command

    command = scheduler_command(settings.data_dir)
    os.execve(command[0], command, dict(os.environ))
    return 0


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


def _add_voice_options(parser: argparse.ArgumentParser) -> None:
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


def _add_local_commands(sub: Subcommands) -> None:
    """Commands that need no running service."""
    say = sub.add_parser("say", help="synthesize text to an audio file locally")
    _add_voice_options(say)
    say.add_argument("-o", "--output", default="out.wav", help="output file (default out.wav)")
    say.set_defaults(func=cmd_say)
    voices = sub.add_parser("voices", help="list known voices and their state")
    voices.add_argument("--json", action="store_true")
    voices.add_argument("--load", action="store_true",
                        help="load each voice and show the execution provider it really runs on")
    voices.add_argument("--install", metavar="PACK", choices=["kokoro"],
                        help="install a voice pack into the voices directory: kokoro (Kokoro-82M's 54 "
                             "voices, npm's kokoro-js 1.2.1), each file checked against its pinned sha256")
    voices.add_argument("--from", dest="source", metavar="TARBALL",
                        help="with --install: the package's npm tarball (kokoro-js-1.2.1.tgz) instead of npm")
    add_flags(voices, "data_dir")  # the voices directory is under it (unless TTS_VOICES_DIR), as for `up`
    voices.set_defaults(func=cmd_voices)
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


def _add_service_commands(sub: Subcommands) -> None:
    """Commands that run parts of the service."""
    up = sub.add_parser("up", help="run API, worker, scheduler (and embedded Redis) here")
    add_flags(up, "api.host", "api.port", "wyoming.host", "wyoming.port", "data_dir")
    up.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    up.set_defaults(func=cmd_up)
    worker = sub.add_parser("worker", help="run one worker against TTS_REDIS_URL")
    add_flags(worker, "worker.pool", "worker.concurrency")
    worker.add_argument("--device", type=int, default=None, metavar="N",
                        help="GPU pool: run on GPU N alone (CUDA_VISIBLE_DEVICES=N); one worker per GPU")
    worker.set_defaults(func=cmd_worker)
    wyoming = sub.add_parser("wyoming", help="run the Wyoming server (Home Assistant's TTS protocol) "
                             "against TTS_REDIS_URL")
    wyoming.add_argument("--host", help="where it listens (TTS_WYOMING_HOST; default: TTS_HOST)")
    wyoming.add_argument("--port", type=int, help="its TCP port (TTS_WYOMING_PORT; default 10200)")
    wyoming.set_defaults(func=cmd_wyoming)
    sub.add_parser("scheduler", help="run the periodic cleanup scheduler").set_defaults(
        func=cmd_scheduler)
    doctor = sub.add_parser("doctor", help="warn about Redis and database settings that risk tasks")
    add_flags(doctor, "data_dir")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.set_defaults(func=cmd_doctor)


def _add_client_commands(sub: Subcommands) -> None:
    """Commands that talk to a running service over HTTP."""
    submit = sub.add_parser("submit", help="submit text to a running service")
    _add_voice_options(submit)
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(prog="tts-queue", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at debug level")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_local_commands(sub)
    _add_service_commands(sub)
    _add_client_commands(sub)
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
