"""Real-time factor per language in one run: one Kokoro-82M voice per language it is served in (the
language's first voice) and the Piper voice, each reading three everyday sentences of its language.

Run from the repository root, with the voice pack installed (``tts-queue voices --install kokoro``;
``--voices-dir`` names where)::

    .venv/bin/python bench/bench_languages.py [--repeats 3] [--voices-dir DIR]

Every voice runs its sentences one call per sentence, as a worker does, on one engine core. Each
voice gets one untimed sentence first, then ``--repeats`` rounds; within a round each voice runs one
sentence in turn, the order rotating, so a shared machine's load falls on each alike. Figures: the
real-time factor (compute seconds / audio seconds, median of rounds), and each voice's over the
Japanese voice's in the same round (median: the comparison that decides; every Kokoro voice runs the
same graph, so this shows what the language's frontend and its sentence lengths add). Writes
``--out`` (default ``bench/results/languages.json``). Intelligibility per language (a recognizer
hearing the speech back): ``bench_hearing.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tts_queue.settings import Settings  # noqa: E402
from tts_queue.synthesis.frontend.text import TEXT  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402

SENTENCES = {  # voice -> three everyday sentences of its language
    "en_US-joe-medium": ["The weather is nice today.", "Could you tell me the way to the station?",
                         "The meeting is planned to start in the afternoon."],
    "af_heart": ["The weather is nice today.", "Could you tell me the way to the station?",
                 "The meeting is planned to start in the afternoon."],
    "bf_emma": ["The weather is lovely today.", "Could you tell me the way to the station?",
                "The meeting should start in the afternoon."],
    "jf_alpha": ["今日はいい天気ですね。", "駅までの道を教えていただけますか。",
                 "会議は午後から始まる予定です。"],
    "zf_xiaoxiao": ["今天天气很好。", "请问去火车站怎么走？", "会议预计下午开始。"],
    "ef_dora": ["Hoy hace buen tiempo.", "¿Podría decirme cómo llegar a la estación?",
                "La reunión empezará por la tarde."],
    "ff_siwis": ["Il fait beau aujourd'hui.", "Pourriez-vous m'indiquer le chemin de la gare ?",
                 "La réunion commencera dans l'après-midi."],
    "if_sara": ["Oggi fa bel tempo.", "Mi può indicare la strada per la stazione?",
                "La riunione inizierà nel pomeriggio."],
    "pf_dora": ["Hoje o tempo está bom.", "Pode me dizer o caminho para a estação?",
                "A reunião vai começar à tarde."],
    "hf_alpha": ["आज मौसम अच्छा है।", "क्या आप मुझे स्टेशन का रास्ता बता सकते हैं?", "बैठक दोपहर में शुरू होगी।"],
}
REFERENCE = "jf_alpha"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--voices-dir", default=str(ROOT / ".venv" / "voices"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/languages.json")
    args = parser.parse_args(argv)
    settings = Settings.from_env({"TTS_DATA_DIR": tempfile.mkdtemp(), "TTS_PROVIDERS": "cpu",
                                  "TTS_VOICES_DIR": args.voices_dir, "TTS_MAX_LOADED_VOICES": "16"})
    registry = VoiceRegistry.from_settings(settings)
    voices = {name: registry.load(name) for name in SENTENCES}
    ids = {name: [ids for sentence in texts
                  for ids, _ in voices[name].script_sentences(((TEXT, sentence),), 400)]
           for name, texts in SENTENCES.items()}

    def run(name: str, index: int) -> tuple[float, float]:
        voice = voices[name]
        started = time.perf_counter()
        item = voice.model.run_batch([ids[name][index]], voice.scales(1.0))[0]
        return time.perf_counter() - started, len(item.samples) / voice.sample_rate

    for name in SENTENCES:
        run(name, 0)  # untimed: first-call costs
    names = list(SENTENCES)
    factors: dict[str, list[float]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    turn = 0
    load = os.getloadavg()[0]
    for _ in range(args.repeats):
        compute = dict.fromkeys(names, 0.0)
        audio = dict.fromkeys(names, 0.0)
        for index in range(3):
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                c, a = run(name, index)
                compute[name] += c
                audio[name] += a
            turn += 1
        for name in names:
            factors[name].append(compute[name] / audio[name])
            ratios[name].append(factors[name][-1] / (compute[REFERENCE] / audio[REFERENCE]))
    report = {
        "measured": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_average": {"start": round(load, 2), "end": round(os.getloadavg()[0], 2)}},
        "repeats": args.repeats,
        "voices": {name: {"language": voices[name].spec.language, "family": voices[name].spec.family,
                          "rtf": round(statistics.median(factors[name]), 3),
                          "rtf_over_japanese": round(statistics.median(ratios[name]), 3)}
                   for name in names},
        "command": "bench/bench_languages.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{'voice':18} {'language':8} {'rtf':>6} {'/ ja':>6}")
    for name, row in report["voices"].items():
        print(f"{name:18} {row['language']:8} {row['rtf']:6.3f} {row['rtf_over_japanese']:6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
