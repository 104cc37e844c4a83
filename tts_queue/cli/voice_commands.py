"""``tts-queue voices``: list the voices and their state, install a voice pack."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from tts_queue.cli.flags import add_flags
from tts_queue.settings import Settings

if TYPE_CHECKING:
    from tts_queue.cli.flags import Subcommands


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


def add_voice_commands(sub: Subcommands) -> None:
    """``voices``."""
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
