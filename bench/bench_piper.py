"""The synchronous form against Piper's own HTTP server, in the same run, on the same voice.

Run from the repository root (about five minutes on 2 cores)::

    .venv/bin/python bench/bench_piper.py [--rounds 2] [--texts 40] [--set TTS_NAME=VALUE ...]
                                          [--out bench/results/piper.json]

Starts ``tts-queue up`` (embedded Redis, SQLite, one worker, defaults) and ``python -m
piper.http_server`` (piper-tts' own Flask server, threaded, one ONNX session) on the default
voice's model, then sends both the same texts from 8 client threads, each request waiting for its
WAV (ours: ``POST /tts?wait=30``; Piper: ``POST /synthesize``), alternating which goes first:

- ``unique``: every text new (our cache is cold); goal: at least 1.0x Piper;
- ``repeats``: 40% of the texts repeat earlier ones (what a real service sees); goal at least 1.5x.

Ratios are ours over Piper's requests/s; results go to a JSON file; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import SENTENCES  # noqa: E402
from bench_service import answering, free_port, start_service  # noqa: E402

from tts_queue.settings import Settings  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def start_piper(model: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "piper.http_server", "-m", str(model), "--host", "127.0.0.1",
               "--port", str(port)]
    process = subprocess.Popen(command, stdout=open(log, "ab"), stderr=subprocess.STDOUT)  # noqa: SIM115
    return answering(process, f"http://127.0.0.1:{port}/voices", 120, log)


def throughput(call: Any, texts: list[str], clients: int = 8) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(call, texts))
    return len(texts) / (time.perf_counter() - started)


def ours(url: str) -> Any:
    def one(text: str) -> None:
        response = requests.post(f"{url}/tts", params={"wait": 30}, json={"text": text, "format": "wav"},
                                 timeout=60)
        assert response.status_code == 200 and response.content[:4] == b"RIFF", response.status_code
    return one


def piper(url: str) -> Any:
    def one(text: str) -> None:
        response = requests.post(f"{url}/synthesize", json={"text": text}, timeout=60)
        assert response.status_code == 200 and response.content[:4] == b"RIFF", response.status_code
    return one


def workloads(count: int, tag: str) -> dict[str, list[str]]:
    """``unique`` texts, and ``repeats``: 60% new texts, then 40% drawn from them, interleaved."""
    unique = [f"{SENTENCES[n % len(SENTENCES)]} ({tag} u{n})" for n in range(count)]
    fresh = [f"{SENTENCES[n % len(SENTENCES)]} ({tag} r{n})" for n in range(count - count * 2 // 5)]
    repeated = [fresh[n % len(fresh)] for n in range(count * 2 // 5)]
    mixed: list[str] = []
    for n, text in enumerate(fresh):
        mixed.append(text)
        if n % 3 == 2 and repeated:
            mixed.append(repeated.pop(0))
    return {"unique": unique, "repeats": mixed + repeated}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--texts", type=int, default=40)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/piper.json")
    parser.add_argument("--set", action="append", default=[], metavar="TTS_NAME=VALUE",
                        help="a setting of the service under test (repeatable)")
    args = parser.parse_args(argv)
    model = VoiceRegistry.from_settings(Settings.from_env(os.environ)).get(None).model_path
    with tempfile.TemporaryDirectory(prefix="bench-piper-") as tmp:
        port, piper_port = free_port(), free_port()
        overrides = dict(item.split("=", 1) for item in args.set)
        service = start_service(Path(tmp), port, overrides)
        server = start_piper(model, piper_port, Path(tmp) / "piper.log")
        url, piper_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{piper_port}"
        try:
            ours(url)("Warm up the service."), piper(piper_url)("Warm up the server.")
            rounds = []
            for index in range(args.rounds):
                texts = workloads(args.texts, uuid.uuid4().hex[:6])
                figures: dict[str, Any] = {}
                for kind, batch in texts.items():
                    order = [("ours", ours(url)), ("piper", piper(piper_url))]
                    for name, call in (order if index % 2 == 0 else order[::-1]):
                        figures[f"{kind}_{name}_req_s"] = throughput(call, batch)
                    figures[f"{kind}_ratio"] = figures[f"{kind}_ours_req_s"] / figures[f"{kind}_piper_req_s"]
                print(f"round {index}: {figures}", flush=True)
                rounds.append(figures)
        finally:
            server.terminate()
            service.terminate()
            server.wait(timeout=30)
            service.wait(timeout=60)
    result = {
        "rounds": rounds,
        "unique_ours_over_piper": statistics.median(r["unique_ratio"] for r in rounds),
        "repeats_ours_over_piper": statistics.median(r["repeats_ratio"] for r in rounds),
        "goals": "unique at least 1.0, 40% repeats at least 1.5",
        "settings": dict(item.split("=", 1) for item in args.set),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("unique_ours_over_piper", "repeats_ours_over_piper")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
