"""Command-line flags declared by the settings themselves, so a flag and its variable are one thing.

A setting declared with ``flag="--port"`` becomes ``--port`` on the commands that ask for it, with
the setting's documentation and variable as its help; a flag given on the command line overrides
the variable.
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from tts_queue.settings import SettingInfo, Settings, describe

if TYPE_CHECKING:  # what ``add_subparsers`` returns; typeshed's generic class, plain at run time
    from typing import TypeAlias

    Subcommands: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]


def _by_path() -> dict[str, SettingInfo]:
    return {info.path: info for info in describe() if info.flag}


def add_flags(parser: argparse.ArgumentParser, *paths: str) -> None:
    """Add the flags of the settings at ``paths`` (dotted, e.g. ``api.port``) to ``parser``."""
    known = _by_path()
    for path in paths:
        info = known[path]
        assert info.flag is not None
        kind = {"api.port": int, "worker.concurrency": int, "wyoming.port": int}.get(path, str)
        parser.add_argument(
            info.flag, dest=f"setting:{path}", type=kind, choices=info.choices or None, default=None,
            help=f"{info.doc} ({info.variable}; default {info.default})",
        )


def apply_flags(settings: Settings, args: argparse.Namespace) -> Settings:
    """``settings`` with every flag given on the command line applied."""
    changes: dict[str, object] = {}
    for name, value in vars(args).items():
        if name.startswith("setting:") and value is not None:
            path = name.split(":", 1)[1]
            changes[path] = Path(value).expanduser() if path == "data_dir" else value
    return settings.replace(**changes) if changes else settings


def parse_duration(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``45s``, ``0s`` (or plain seconds) as a ``timedelta``."""
    from tts_queue.errors import InvalidRequest

    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    value = text.strip().lower()
    try:
        if value and value[-1] in units:
            return timedelta(seconds=float(value[:-1]) * units[value[-1]])
        return timedelta(seconds=float(value))
    except ValueError:
        raise InvalidRequest(f"{text!r} is not a duration; use a form like 7d, 12h, 30m or 0s") from None
