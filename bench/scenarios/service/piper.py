"""The synchronous form against Piper's own HTTP server, in the same run, on the same voice:
``tts-queue up`` and ``python -m piper.http_server`` (piper-tts' own Flask server, threaded, one
ONNX session) on the voice's model get the same texts from 8 client threads, each request waiting
for its WAV (ours: ``POST /tts?wait=30``; Piper: ``POST /synthesize``), which goes first alternating:
``unique`` (every text new: our cache is cold; goal at least 1.0x Piper) and ``repeats`` (40% of the
texts repeat earlier ones, as a real service sees; goal at least 1.5x). Ratios: ours over Piper's
requests per second."""

from __future__ import annotations

import statistics
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import requests

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stack import answering, free_port, stop
from bench.harness.texts import SENTENCES
from bench.harness.tree import clean_env
from bench.scenarios.service.client import throughput


def start_piper(model: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Piper's HTTP server on ``model``, answering; it and its URL."""
    port = free_port()
    with open(log, "ab") as out:
        process = subprocess.Popen([sys.executable, "-m", "piper.http_server", "-m", str(model), "--host",
                                    "127.0.0.1", "--port", str(port)], env=clean_env(), stdout=out,
                                   stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    answering(url + "/voices", process, log, 120)
    return process, url


def poster(url: str, route: str, body: dict[str, str]) -> Callable[[str], None]:
    """One request to ``route``, waiting for its WAV."""
    def one(text: str) -> None:
        response = requests.post(f"{url}{route}", params={"wait": 30} if route == "/tts" else None,
                                 json={"text": text, **body}, timeout=60)
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


@scenario("piper", subject="service", takes="about 5 minutes", quick={"voice": "tiny", "rounds": 1,
                                                                      "texts": 10},
          description="POST /tts against piper-tts' own HTTP server on the same voice and texts, unique and "
                      "with 40% repeats")
def piper(run: Run, voice: str = "default", rounds: int = 2, texts: int = 40, clients: int = 8) -> Figures:
    """``rounds`` rounds of both workloads on both servers."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.registry import VoiceRegistry

    model = VoiceRegistry.from_settings(Settings.from_env(run.env(voice))).get(None).model_path
    found: list[dict[str, float]] = []
    with run.up(voice) as up:
        server, piper_url = start_piper(model, run.work / "piper.log")
        try:
            ours, theirs = poster(up.url, "/tts", {"format": "wav"}), poster(piper_url, "/synthesize", {})
            ours("Warm up the service.")
            theirs("Warm up the server.")
            for number in range(rounds):
                figures: dict[str, float] = {}
                for kind, batch in workloads(texts, uuid.uuid4().hex[:6]).items():
                    order = [("ours", ours), ("piper", theirs)]
                    for name, call in order if number % 2 == 0 else order[::-1]:
                        figures[f"{kind}_{name}_req_s"] = throughput(call, batch, clients)
                    figures[f"{kind}_ratio"] = figures[f"{kind}_ours_req_s"] / figures[f"{kind}_piper_req_s"]
                run.say(f"round {number}: {figures}")
                found.append(figures)
        finally:
            stop(server, 30)
    ratio = {kind: round(statistics.median(r[f"{kind}_ratio"] for r in found), 4)
             for kind in ("unique", "repeats")}
    return {"headline": {"unique_ours_over_piper": ratio["unique"],
                         "repeats_ours_over_piper": ratio["repeats"]},
            "goals": "unique at least 1.0, 40% repeats at least 1.5", "rounds": found}
