"""Fairness between keys, as a client sees it: one key's short requests beside another key's long work.
Each part starts ``tts-queue up`` of the measured tree with ``TTS_AUTH=required`` and two keys (A:
the long work, B: the short requests), stopped after it, so a long render never bleeds into the next
part (a quick form's parts share one):

``idle``: B's one-sentence ``POST /tts?wait=30`` (unique texts), p50/p95; ``english``: beside one
request of A of unique long English sentences at an SSML rate of 0.1; ``japanese``: beside one
request of about 1,500 characters of unique Japanese sentences (``jf_alpha``, Kokoro); ``book``:
beside A's rendering of a book (``POST /v1/books``); ``many``: beside ``many`` (16) long English
requests of A at speed 0.25. B's requests start at a fixed pace once A's work runs: their p50, p95
and the first one's latency, each as a ratio to idle, and each B task's claim delay. With
``same_key`` B is A: the short requests come from the key whose long work runs (fair within one
tenant, as every local client is with keys off). A request not
answered within ``bound`` seconds counts as the bound; ``budget_s`` is the worker's shutdown budget
(the long work left running is not waited for). Before fair order: ``--against 6a0867e``."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.harness.books import book_path
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stack import Up
from bench.harness.texts import english_sentences, japanese_text
from bench.scenarios.fairness.shorts import claims, listed, paced, short_text, summary
from bench.scenarios.fairness.shorts import one_short as short
from bench.scenarios.service.client import FINISHED

PARTS = ("idle", "english", "japanese", "book", "many")
# room for the long requests (the same for every tree measured): the English one at rate 0.1 is
# about 40 minutes of audio, over the default TTS_MAX_AUDIO_S (1800) and TTS_MAX_TEXT_CHARS (5000)
LIMITS = {"TTS_MAX_AUDIO_S": "14400", "TTS_MAX_TEXT_CHARS": "20000", "TTS_AUTH": "required"}


def long_work(up: Up, key: str, part: str, book: Path, many: int) -> tuple[list[str], str]:
    """A's long work for ``part``: its status URLs, and what it is."""
    payloads: list[dict[str, Any]]
    with up.session(key) as http:
        if part == "book":
            with open(book, "rb") as handle:
                answer = http.post(f"{up.url}/v1/books", files={"file": (book.name, handle)},
                                   data={"format": "mp3"},
                                   timeout=120)
            assert answer.status_code in (200, 201, 202), answer.text
            return [answer.json()["status_url"]], f"the book {book.name}"
        if part == "english":
            sentences = english_sentences(40, seed=2)
            ssml = ('<speak><prosody rate="25%"><prosody rate="40%">' + " ".join(sentences)
                    + "</prosody></prosody></speak>")
            payloads = [{"text": ssml, "text_type": "ssml"}]
            what = f"{len(sentences)} unique long English sentences at an SSML rate of 0.1"
        elif part == "japanese":
            text = japanese_text(1500, seed=3)
            payloads, what = [{"text": text,
                               "voice": "jf_alpha"}], f"{len(text)} characters of Japanese (jf_alpha)"
        else:  # many
            pool = english_sentences(many * 8, seed=5)
            payloads = [{"text": " ".join(pool[i * 8:(i + 1) * 8]), "speed": 0.25} for i in range(many)]
            what = f"{many} different requests of 8 unique long English sentences each at speed 0.25"
        urls = []
        for payload in payloads:
            answer = http.post(f"{up.url}/v1/tts", json=payload, timeout=60)
            assert answer.status_code in (200, 202), answer.text
            urls.append(answer.json()["status_url"])
        return urls, what


def running(up: Up, key: str, urls: list[str], part: str, swing_s: float, timeout_s: float = 180) -> float:
    """Seconds until A's work runs (a book: parsed); then ``swing_s`` of it in full swing (a book
    5/3 of it)."""
    started = time.monotonic()
    with up.session(key) as http:
        while time.monotonic() - started < timeout_s:
            states = [http.get(url, timeout=30).json()["status"] for url in urls]
            parsed = part == "book" and all(s != "parsing" for s in states)
            if parsed or (part != "book" and "running" in states):
                break
            time.sleep(0.2)
    waited = time.monotonic() - started
    time.sleep(swing_s * 5 / 3 if part == "book" else swing_s)
    return waited


def one_part(up: Up, part: str, options: dict[str, Any]) -> dict[str, Any]:
    """One part on ``up``."""
    a = up.key("fair-a", "--max-queued", "20000")  # a book: about 6,400 tasks
    b = a if options["same_key"] else up.key("fair-b")
    found: dict[str, Any] = {"ready_s": round(getattr(up, "ready_s", 0.0), 1)}
    with up.session(b) as http:
        short(http, up.url, short_text("warm", 0), options["bound"])  # the voice loaded
        before = {row["task_id"] for row in listed(http, up.url)}
    if part == "idle":
        shorts = paced(lambda: up.session(b), up.url, "idle", options["idle_n"], options["idle_every"],
                       options["bound"])
    else:
        started = time.monotonic()
        urls, found["long_work"] = long_work(up, a, part, options["book"], options["many"])
        found["long_running_after_s"] = round(running(up, a, urls, part, options["swing_s"]), 1)
        shorts = paced(lambda: up.session(b), up.url, part, options["busy_n"], options["busy_every"],
                       options["bound"])
        with up.session(a) as http:
            progress = [http.get(url, timeout=30).json() for url in urls]
        found["long_still_rendering"] = any(p["status"] not in FINISHED for p in progress)
        found["long_elapsed_s"] = round(time.monotonic() - started, 1)
    found.update(summary(shorts))
    with up.session(b) as http:
        found.update(claims([row for row in listed(http, up.url) if row["task_id"] not in before]))
    return found


@scenario("fairness", subject="fairness", takes="10-20 minutes", quick={
    "voice": "tiny", "parts": "idle,many", "idle_n": 2, "busy_n": 2, "busy_every": 0.2, "idle_every": 0.2,
    "bound": 60.0, "swing_s": 0.3, "many": 4, "budget_s": 1.0},
    description="one key's short requests beside another key's long work (English at a slow SSML rate, "
                "Japanese, a book, 16 long requests), as ratios to idle")
def fairness(run: Run, voice: str = "default", parts: str = ",".join(PARTS), bound: float = 120.0,
             idle_n: int = 15, idle_every: float = 1.0, busy_n: int = 12, busy_every: float = 1.5,
             swing_s: float = 3.0, many: int = 16, budget_s: float = 0.0, same_key: bool = False) -> Figures:
    """Idle first (every ratio is to this run's own idle), then each part asked."""
    options: dict[str, Any] = {"voice": voice, "bound": bound, "idle_n": idle_n, "idle_every": idle_every,
                               "busy_n": busy_n, "busy_every": busy_every, "swing_s": swing_s, "many": many,
                               "same_key": same_key}
    options["book"] = book_path(run.quick, run.work)
    chosen = ["idle", *(p for p in PARTS if p in parts.split(",") and p != "idle")]
    found: dict[str, Any] = {}
    with ExitStack() as stack:  # a quick form's parts share one service; a full one's each its own
        settings = LIMITS | ({"TTS_SHUTDOWN_BUDGET_S": str(budget_s)} if budget_s else {})
        shared = stack.enter_context(run.up(voice, settings)) if run.quick else None
        for part in chosen:
            with ExitStack() as own:
                found[part] = one_part(shared or own.enter_context(run.up(voice, settings)), part, options)
            run.say(f"{part}: p50 {found[part]['p50_s']:.2f} s, p95 {found[part]['p95_s']:.2f} s, "
                    f"timeouts {found[part]['timeouts']}/{found[part]['n']}")
    idle = found["idle"]
    headline: dict[str, Any] = {"idle_p50_s": idle["p50_s"]}
    for part, result in found.items():
        result["ratio"] = {"p50": result["p50_s"] / idle["p50_s"], "p95": result["p95_s"] / idle["p95_s"],
                           "first_over_idle_p50": result["first_s"] / idle["p50_s"]}
        if part != "idle":
            headline |= {f"{part}_p50_s": result["p50_s"],
                         f"{part}_p50_over_idle": round(result["ratio"]["p50"], 3),
                         f"{part}_timeouts": result["timeouts"]}
    return {"headline": headline, "bound_s": bound, "auth": "required", "same_key": same_key, "parts": found}
