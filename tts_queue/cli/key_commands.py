"""``tts-queue keys``: make, list and revoke API keys in the deployment's database.

``keys create NAME`` prints the new key alone on the last line of its output, once (only a hash
is stored); ``keys list`` shows names, prefixes, limits and state, never a key; ``keys revoke
NAME`` stops a key at once in every API process (within a few seconds). They take ``--data-dir``
as ``up`` does, and the same ``TTS_*`` settings.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from tts_queue.settings import Settings

if TYPE_CHECKING:
    from tts_queue.access.keys import ApiKeys
    from tts_queue.cli.flags import Subcommands


def _keys(settings: Settings) -> ApiKeys:
    from tts_queue.access.keys import ApiKeys
    from tts_queue.db import Database
    from tts_queue.migrate import upgrade

    upgrade(settings.database_url)
    return ApiKeys(Database(settings.database_url))


def cmd_create(args: argparse.Namespace, settings: Settings) -> int:
    """Make a key; print what it may do, its webhook secret if asked for, then the key alone on
    the last line."""
    from tts_queue.access.keys import new_webhook_secret

    secret = new_webhook_secret() if args.webhook_secret else None
    info, key = _keys(settings).create(args.name, rate=args.rate, max_queued=args.max_queued,
                                       admin=args.admin, webhook_secret=secret)
    print(f"key {info.name!r}: rate {info.rate}, at most {info.max_queued} tasks queued"
          f"{', admin' if info.admin else ''}. It is shown this once; only its hash is stored:",
          file=sys.stderr)
    if secret is not None:
        print(f"webhook secret (signs this key's webhooks' X-TTS-Signature; give it to its receivers): "
              f"{secret}")
    print(key)
    return 0


def cmd_list(args: argparse.Namespace, settings: Settings) -> int:
    """Every key: name, prefix, limits, admin, created, revoked."""
    rows = _keys(settings).list()
    if args.json:
        print(json.dumps([{"name": r.name, "prefix": r.prefix, "rate": r.rate, "max_queued": r.max_queued,
                           "admin": r.admin, "created_at": r.created_at.isoformat(),
                           "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None}
                          for r in rows], indent=2))
        return 0
    print(f"{'name':24} {'prefix':18} {'rate':14} {'max queued':>10} {'admin':6} {'state'}")
    for r in rows:
        state = f"revoked {r.revoked_at:%Y-%m-%d %H:%M}" if r.revoked_at else "live"
        print(f"{r.name:24} tts_{r.prefix:14} {r.rate:14} {r.max_queued:>10} {'yes' if r.admin else 'no':6} "
              f"{state}")
    return 0


def cmd_revoke(args: argparse.Namespace, settings: Settings) -> int:
    """Revoke a key by name; exit code 1 if no live key has that name."""
    if _keys(settings).revoke(args.name):
        print(f"key {args.name!r} revoked", file=sys.stderr)
        return 0
    print(f"no live key called {args.name!r}", file=sys.stderr)
    return 1


def add_key_commands(sub: Subcommands, add_data_dir: Callable[[argparse.ArgumentParser], None]) -> None:
    """The ``keys`` command group."""
    from tts_queue.access.keys import DEFAULT_MAX_QUEUED, DEFAULT_RATE

    keys = sub.add_parser("keys", help="API keys (TTS_AUTH=required): create, list, revoke")
    commands = keys.add_subparsers(dest="keys_command", required=True)
    create = commands.add_parser("create", help="make a key; prints it once, on the last line")
    create.add_argument("name")
    create.add_argument("--rate", default=DEFAULT_RATE, help=f"submissions allowed (default {DEFAULT_RATE})")
    create.add_argument("--max-queued", dest="max_queued", type=int, default=DEFAULT_MAX_QUEUED,
                        help=f"most tasks queued or running at once (default {DEFAULT_MAX_QUEUED})")
    create.add_argument("--admin", action="store_true", help="may see deployment-wide views")
    create.add_argument("--webhook-secret", dest="webhook_secret", action="store_true",
                        help="give the key a webhook secret of its own (printed once), signing its "
                             "webhooks instead of TTS_WEBHOOK_SECRET")
    create.set_defaults(func=cmd_create)
    listing = commands.add_parser("list", help="every key (never the keys themselves)")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_list)
    revoke = commands.add_parser("revoke", help="revoke a key by name")
    revoke.add_argument("name")
    revoke.set_defaults(func=cmd_revoke)
    for parser in (create, listing, revoke):
        add_data_dir(parser)
