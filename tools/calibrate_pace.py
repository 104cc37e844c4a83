"""Calibrate each voice's pace (``models/voices.json`` ``"pace"``) from its real audio.

Run from the repository root on the reference machine (2 cores; about 20 minutes, most of it
the Kokoro voices)::

    .venv/bin/python -m tools.calibrate_pace [--voices en_US-joe-medium,jf_alpha] [--no-write]

The first voice of each family and language (``--voices`` order; default every installed voice,
the manifest's order; ``--voices-dir``: where the voice packs are) is calibrated in full: it
synthesizes the calibration corpus (``bench/data/pace_corpus.json``, the items of the voice's
language) sentence by sentence at several speeds with the voice's default synthesis parameters,
and counts each sentence as the admission estimate does (``duration.Counted``: its frontend's
symbols and pause marks), as the ``estimate`` benchmark does (``bench.scenarios.voices.estimate``,
whose measuring this reuses). Then:

- ``speech``: the pace's seven figures (``synthesis.pace``), fitted by non-negative least squares
  on relative error, each sentence assigned to the spoken or the floor term by whichever is larger
  (iterated), then scaled so that the median sentence lasts ``TARGET`` of its estimate (a single
  sentence's audio varies by about a tenth around the fit: Piper's noise, prosody);
- ``scripts``: the most symbols one character of each script became in the voice's frontend over
  a scan of every Unicode character of the basic plane (and every 16th beyond), alone and tripled,
  and runs of 1-60 digits, times ``CHAR_MARGIN`` (for contexts the scan does not try); ``pauses``:
  the characters that became pause marks (and the most marks one became), and those after which
  the frontend ended a sentence, between words;
- ``rtf``: CPU seconds (phonemes and model, every thread) per second of audio, all sentences.

The family's other voices of the language (Kokoro's share one graph and frontend) are synthesized
at speed 1 only: their pace is the calibrated voice's scaled to their own median, their ``rtf``
their own.

It writes the paces into the manifest (``--no-write``: only the results), and the fits, the
errors per kind and speed, the estimate's cost per 5,000 characters (English, Japanese) and, with
``--check`` (default ``tests/real/data/estimate_corpus.json``), the held-in corpus' real/estimate ratios
per kind (as ``tests/real/test_real_estimate.py`` checks them) to ``tools/results/calibration.json``.
How the shipped paces then fare against the real audio, without fitting anything:
``python -m bench run estimate``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.scenarios.voices.estimate import (
    CORPUS,
    SAMPLES,
    SLOWEST,
    SPEEDS,
    Row,
    cost_per_5000,
    held_in,
    language_of,
    measure,
    ratios,
    real_over_estimate,
)
from tts_queue.errors import TTSQueueError
from tts_queue.settings import Settings
from tts_queue.synthesis.estimate.duration import Counted, script_counts
from tts_queue.synthesis.estimate.pace import SCRIPTS, SPEECH, Pace
from tts_queue.synthesis.estimate.spoken import Frontend, frontend_for, max_symbols
from tts_queue.synthesis.frontend.text import TEXT, clean_text
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.voice import LoadedVoice

ROOT = Path(__file__).resolve().parents[1]
HELD_IN = ROOT / "tests" / "real" / "data" / "estimate_corpus.json"
RESULTS = ROOT / "tools" / "results" / "calibration.json"
MANIFEST = ROOT / "models" / "voices.json"
TARGET = 0.9
CHAR_MARGIN = 1.25
CONTEXTS = ("one{} Two", "one{}two", "one {} two", "ab{}{}{} cd")  # where a character may end or pause


def nnls(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Non-negative least squares (Lawson-Hanson's active set, for a handful of columns)."""
    n = a.shape[1]
    x, passive = np.zeros(n), np.zeros(n, dtype=bool)
    for _ in range(3 * n):
        gradient = a.T @ (b - a @ x)
        if passive.all() or gradient[~passive].max(initial=-1.0) <= 1e-12:
            break
        passive[int(np.argmax(np.where(passive, -np.inf, gradient)))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if (z[passive] > 0).all():
                x = z
                break
            negative = passive & (z <= 0)
            step = np.min(x[negative] / (x[negative] - z[negative]))
            x = x + step * (z - x)
            passive &= x > 1e-12
    return x


Matrix = npt.NDArray[np.float64]


def features(rows: Sequence[Row]) -> tuple[Matrix, Matrix, Matrix]:
    """The spoken term's columns (n/s, m/s, 1/s, n, 1), the floor's (n, 1), the seconds."""
    n = np.array([r["symbols"] for r in rows], dtype=float)
    m = np.array([r["marks"] for r in rows], dtype=float)
    s = np.array([r["speed"] for r in rows], dtype=float)
    ones = np.ones_like(n)
    return (np.stack([n / s, m / s, ones / s, n, ones], axis=1), np.stack([n, ones], axis=1),
            np.array([r["seconds"] for r in rows], dtype=float))


def fit(rows: Sequence[Row]) -> dict[str, float]:
    """The seven speech figures (``pace.SPEECH``) that fit the rows best, before the margin."""
    spoken, floor, seconds = features(rows)
    weight = 1 / seconds
    on_floor = np.array([r["speed"] >= 4 for r in rows])
    for _ in range(30):
        lc = nnls(spoken[~on_floor] * weight[~on_floor, None], np.ones(int((~on_floor).sum())))
        fc = (nnls(floor[on_floor] * weight[on_floor, None], np.ones(int(on_floor.sum())))
              if on_floor.any() else np.zeros(2))
        now = floor @ fc > spoken @ lc
        if (now == on_floor).all():
            break
        on_floor = now
    return dict(zip(SPEECH, [*lc.tolist(), *fc.tolist()], strict=True))


def scan_chars() -> list[str]:
    """Every character a cleaned text can hold: the basic plane, every 16th beyond (to U+2FFFF)."""
    chars = []
    for code in [*range(0x21, 0x10000), *range(0x10000, 0x30000, 16)]:
        ch = chr(code)
        try:
            if clean_text(f"a{ch}a", 10) == f"a{ch}a":
                chars.append(ch)
        except TTSQueueError:
            continue
    return chars


def script_of_char(ch: str) -> str:
    """The script the bound counts ``ch`` in (``duration.script_counts``)."""
    latin, japanese, _ = script_counts(ch)
    return "latin" if latin else "japanese" if japanese else "other"


class Scan:
    """What a frontend makes of each character (see the module docstring)."""

    def __init__(self, frontend: Frontend, max_len: int) -> None:
        self.frontend, self.max_len = frontend, max_len
        self.worst = dict.fromkeys(SCRIPTS, 0.0)
        self.worst_text = dict.fromkeys(SCRIPTS, "")
        self.marks: set[str] = set()
        self.ends: set[str] = set()
        self.most_marks = 0.0

    def said(self, text: str) -> list[Counted] | None:
        try:
            return [Counted.of(s) for s in self.frontend.script(((TEXT, text),), self.max_len)]
        except TTSQueueError:
            return None

    def symbols(self, text: str, chars: int, script: str) -> None:
        found = self.said(text)
        per_char = sum(c.symbols for c in found) / chars if found else 0.0
        if per_char > self.worst[script]:
            self.worst[script], self.worst_text[script] = per_char, text[:12]

    def pauses(self, ch: str) -> None:
        for context in CONTEXTS:
            found, bare = self.said(context.format(ch, ch, ch)), self.said(context.format("", "", ""))
            if found is None:
                continue
            if len(found) > 1:
                self.ends.add(ch)
            extra = sum(c.marks for c in found) - sum(c.marks for c in bare or ())
            if extra > 0:
                self.marks.add(ch)
                self.most_marks = max(self.most_marks, extra / context.count("{}"))

    def run(self) -> dict[str, Any]:
        for ch in scan_chars():
            script = script_of_char(ch)
            self.symbols(ch, 1, script)
            self.symbols(ch * 3, 3, script)
            self.pauses(ch)
        for length in range(1, 61):
            for digits in ("7" * length, ("1234567890" * 6)[:length], "1" + "0" * (length - 1)):
                self.symbols(digits, length, "latin")
        return {"char_symbols": {k: round(v * CHAR_MARGIN, 2) for k, v in self.worst.items()},
                "worst": self.worst, "worst_text": self.worst_text,
                "char_marks": round(max(1.0, self.most_marks) * CHAR_MARGIN, 2),
                "marks": "".join(sorted(self.marks)), "ends": "".join(sorted(self.ends))}


def rounded(values: dict[str, float]) -> dict[str, float]:
    return {k: float(f"{v:.4g}") for k, v in values.items()}


def scan_figures(scan: dict[str, Any]) -> dict[str, Any]:
    """The pace's fields a scan gives (the bound's worst cases per character)."""
    symbols = scan["char_symbols"]
    return {"latin_symbols": symbols["latin"], "japanese_symbols": symbols["japanese"],
            "other_symbols": symbols["other"], "marks": scan["marks"], "char_marks": scan["char_marks"],
            "ends": scan["ends"]}


def calibrated_pace(rows: Sequence[Row], scan: dict[str, Any]) -> tuple[Pace, dict[str, Any]]:
    """The pace fitted to ``rows`` (margin applied) with the scan's figures, and how it fitted."""
    fitted = fit(rows)
    margin = statistics.median(real_over_estimate(rows, Pace.from_figures(fitted))) / TARGET
    pace = Pace.from_figures(rounded({k: v * margin for k, v in fitted.items()}), **scan_figures(scan),
                             rtf=rtf_of(rows))
    return pace, {"fit_before_margin": rounded(fitted), "margin": round(margin, 4)}


def rtf_of(rows: Sequence[Row]) -> float:
    return float(f"{sum(r['cpu_s'] for r in rows) / sum(r['seconds'] for r in rows):.3g}")


def scaled_pace(reference: Pace, rows: Sequence[Row]) -> tuple[Pace, dict[str, Any]]:
    """The reference voice's pace scaled to ``rows``' median (their voice's own ``rtf``)."""
    factor = statistics.median(real_over_estimate(rows, reference)) / TARGET
    rest: dict[str, Any] = {f.name: getattr(reference, f.name) for f in dataclasses.fields(reference)
                            if f.name not in SPEECH}
    speech = rounded({name: getattr(reference, name) * factor for name in SPEECH})
    pace = Pace.from_figures(speech, **(rest | {"rtf": rtf_of(rows)}))
    return pace, {"scaled_from_reference": round(factor, 4)}


def write_manifest(path: Path, paces: dict[str, Pace]) -> None:
    """Each calibrated voice's ``pace`` into the manifest, the rest of it as it was."""
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for entry in manifest["voices"]:
        if entry["id"] in paces:
            entry["pace"] = paces[entry["id"]].to_json()
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


class Calibration:
    """The voices' paces, one voice after another (see the module docstring)."""

    def __init__(self, registry: VoiceRegistry, corpus: list[dict[str, Any]],
                 log: Callable[[str], None], scaled_items: int = 0) -> None:
        self.registry, self.corpus, self.log = registry, corpus, log
        self.scaled_items = scaled_items  # a scaled voice reads this many of its items (0: all)
        self.references: dict[tuple[str, str], Pace] = {}  # (family, language) -> its calibrated pace
        self.scans: dict[tuple[str, str], dict[str, Any]] = {}  # (family, voice language) -> scan figures
        self.paces: dict[str, Pace] = {}
        self.loaded: dict[str, LoadedVoice] = {}
        self.report: dict[str, Any] = {}

    def voice(self, voice_id: str) -> None:
        voice = self.registry.load(voice_id)
        spec, began = voice.spec, time.perf_counter()
        items = [i for i in self.corpus if i["language"] == language_of(spec)]
        reference = self.references.get((spec.family, language_of(spec)))
        if reference is None:
            rows = measure(voice, items, SPEEDS[spec.family], SLOWEST[spec.family])
            self.log(f"{spec.id}: {len(rows)} rows measured; scanning its frontend's characters")
            found = Scan(frontend_for(spec), max_symbols(spec, 400)).run()
            pace, how = calibrated_pace(rows, found)
            how["scan"] = {k: v for k, v in found.items() if k not in ("ends", "marks")}
            self.references[spec.family, language_of(spec)] = pace
            self.scans[spec.family, spec.language] = scan_figures(found)
        else:
            step = max(1, len(items) // self.scaled_items) if self.scaled_items else 1
            rows = measure(voice, items[::step][:self.scaled_items or None], (1.0,))  # every kind
            pace, how = scaled_pace(reference, rows)
            if (spec.family, spec.language) not in self.scans:
                # another frontend than the reference's (British English after American): its own
                # characters' worst cases for the bound
                self.log(f"{spec.id}: scanning its frontend's characters ({spec.language})")
                found = Scan(frontend_for(spec), max_symbols(spec, 400)).run()
                self.scans[spec.family, spec.language] = scan_figures(found)
                how["scan"] = {k: v for k, v in found.items() if k not in ("ends", "marks")}
            pace = dataclasses.replace(pace, **self.scans[spec.family, spec.language])
        self.paces[spec.id] = pace
        self.loaded[spec.id] = voice
        voice.spec = dataclasses.replace(spec, pace=pace)  # the held-in check and the cost with it
        self.report[spec.id] = {"rows": len(rows), "audio_s": round(sum(r["seconds"] for r in rows), 1),
                                "took_s": round(time.perf_counter() - began, 1), "pace": pace.to_json(),
                                **how, "real_over_estimate": ratios(rows, pace)}
        self.log(f"{spec.id}: {json.dumps(self.report[spec.id]['pace']['speech'])} rtf {pace.rtf}; "
                 f"real/estimate {json.dumps(self.report[spec.id]['real_over_estimate']['all'])}")


def calibrate(args: argparse.Namespace, log: Callable[[str], None]) -> dict[str, Any]:
    """Every asked voice calibrated; the manifest written unless ``--no-write``; the report."""
    settings = Settings.from_env({"TTS_DATA_DIR": tempfile.mkdtemp(), "TTS_PROVIDERS": "cpu",
                                  "TTS_MAX_LOADED_VOICES": "8", "TTS_MAX_AUDIO_S": "1e9",
                                  **({"TTS_VOICES_DIR": args.voices_dir} if args.voices_dir else {})})
    registry = VoiceRegistry.from_settings(settings)
    run = Calibration(registry, json.loads(CORPUS.read_text(encoding="utf-8"))["items"], log,
                      args.scaled_items)
    for voice_id in args.voices.split(",") if args.voices else [s.id for s in registry.specs() if s.present]:
        run.voice(voice_id)
    if not args.no_write:
        write_manifest(Path(args.manifest), run.paces)
    cost: dict[str, dict[str, float]] = {}
    for voice in run.loaded.values():
        language = language_of(voice.spec)
        if language not in cost:
            cost[language] = cost_per_5000(voice.spec, SAMPLES[language])
    checked = held_in(run.loaded, Path(args.check)) if args.check and Path(args.check).is_file() else {}
    return {"voices": run.report, "cost_per_5000_chars": cost, "held_in": checked, "target": TARGET,
            "char_margin": CHAR_MARGIN}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--voices", default="",
                        help="voice ids, comma-separated (default: every installed one)")
    parser.add_argument("--manifest", default=str(MANIFEST))
    parser.add_argument("--voices-dir", default="",
                        help="where installed voice packs are (tts-queue voices --install kokoro)")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--check", default=str(HELD_IN), help="the held-in corpus ('' to skip)")
    parser.add_argument("--no-write", action="store_true", help="leave the manifest as it is")
    parser.add_argument("--scaled-items", type=int, default=0,
                        help="a voice scaled from its language's first reads only this many items (0: all)")
    args = parser.parse_args()
    result = calibrate(args, lambda line: print(line, flush=True))
    result |= {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version(),
               "command": " ".join(["python -m tools.calibrate_pace", *sys.argv[1:]])}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps({"cost_per_5000_chars": result["cost_per_5000_chars"], "held_in": result["held_in"]},
                     indent=1))


if __name__ == "__main__":
    main()
