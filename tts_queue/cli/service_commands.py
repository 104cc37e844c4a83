"""The commands that run parts of the service: ``up``, ``worker``, ``wyoming``, ``scheduler``,
and ``doctor``, which checks the settings they run on."""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import TYPE_CHECKING

from tts_queue.cli.flags import add_flags
from tts_queue.errors import ConfigError
from tts_queue.settings import Settings

if TYPE_CHECKING:
    from tts_queue.cli.flags import Subcommands


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


def add_service_commands(sub: Subcommands) -> None:
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
