"""The Wyoming server's way into the queue: the same core services the HTTP API calls (the task
service, the audio relay, the API keys, quotas and rates), built once per process, and the voices
as Wyoming's ``info`` lists them. Every method here blocks (the database, Redis): the connections
run them on the server's threads (``wyoming_server.listener``), one bounded step at a time.

Whose work it is: with ``TTS_AUTH=required``, the key in ``TTS_WYOMING_KEY`` (the protocol carries
none): its rate, quota and fair share apply to every Wyoming request, and a revoked key refuses
them within seconds; with auth off, no key (``owner`` ``None``, as an HTTP request without one),
and each client address is its own tenant for the rate and the connection slots, as on HTTP.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import version
from typing import Any

from wyoming.info import Attribution, Info, TtsProgram, TtsVoice, TtsVoiceSpeaker
from wyoming.tts import SynthesizeVoice

from tts_queue.access.keys import ApiKeys, Principal, Usage
from tts_queue.access.quota import check_quota
from tts_queue.access.rates import UNLIMITED, SubmissionRates, rate_owner
from tts_queue.broker.connection import redis_client
from tts_queue.broker.watch import RedisWatch
from tts_queue.errors import ConfigError, InvalidRequest, RateLimited, TTSQueueError, Unauthorized
from tts_queue.settings import Settings
from tts_queue.synthesis.family import KOKORO
from tts_queue.synthesis.frontend.script import load_lexicon
from tts_queue.synthesis.voice import VoiceSpec, resolve_speaker
from tts_queue.tasks.relay import AudioRelay
from tts_queue.tasks.view import TaskView
from tts_queue.wiring.root import Wiring

log = logging.getLogger(__name__)
# How Wyoming's text is read: a chat model's answer, so Markdown (headings, list items and table rows
# as sentences, emphasis and code marks silent, links as their text: ``synthesis/frontend/chat.py``).
# One constant: "text" reads it as written.
TEXT_TYPE = "markdown"
FORMAT = "wav"  # streamed as a WAV (its header gives the rate), sent on as raw PCM
ATTRIBUTIONS = {
    KOKORO: Attribution(name="hexgrad (Kokoro-82M)", url="https://huggingface.co/hexgrad/Kokoro-82M"),
}
PIPER = Attribution(name="Piper voices", url="https://github.com/OHF-Voice/piper1-gpl")


@dataclass(frozen=True)
class Voice:
    """The request fields of a Wyoming voice choice, checked against the registry."""

    fields: dict[str, Any]


class SpeechQueue:
    """Submit sentences, relay their audio, describe the voices: for the Wyoming server."""

    def __init__(self, wiring: Wiring, keys: ApiKeys, usage: Usage, rates: SubmissionRates) -> None:
        self.wiring = wiring
        self.settings: Settings = wiring.settings
        self.keys = keys
        self.usage = usage
        self.rates = rates

    @classmethod
    def build(cls, settings: Settings) -> SpeechQueue:
        """The core over ``settings``' Redis and database, sending work through Celery as the API
        does; ``ConfigError`` when keys are required and ``TTS_WYOMING_KEY`` is not a live one."""
        from workers.dispatch import CeleryDispatcher, make_client

        if not settings.services.redis_url:
            raise ConfigError("the Wyoming server needs TTS_REDIS_URL and TTS_DATABASE_URL (the ones the "
                              "API uses); `tts-queue up --wyoming-port PORT` runs one for you")
        load_lexicon(settings.request.lexicon)  # a malformed TTS_LEXICON stops it at start, as the API
        redis = redis_client(settings.services.redis_url)
        dispatcher = CeleryDispatcher(make_client(settings), settings.services.queue_prefix)
        wiring = Wiring.build(settings, dispatcher, RedisWatch.from_settings(settings, redis), redis=redis)
        queue = cls(wiring, ApiKeys(wiring.db), Usage(wiring.db), SubmissionRates(settings))
        queue.check_key()
        return queue

    def check_key(self) -> None:
        """With keys required, ``ConfigError`` unless ``TTS_WYOMING_KEY`` is a live key."""
        if self.settings.api.auth != "required":
            return
        if not self.settings.wyoming.key:
            raise ConfigError("TTS_AUTH=required: the Wyoming protocol carries no key, so the Wyoming "
                              "server serves only under one of its own; make one (`tts-queue keys create "
                              "home-assistant`) and set TTS_WYOMING_KEY to it")
        if self.keys.verify(self.settings.wyoming.key) is None:
            raise ConfigError("TTS_WYOMING_KEY is not a live API key (revoked, or mistyped); make one with "
                              "`tts-queue keys create NAME`")

    def principal(self) -> Principal | None:
        """Whose work a request is: ``TTS_WYOMING_KEY``'s key, or nobody with auth off;
        ``Unauthorized`` once that key was revoked."""
        if self.settings.api.auth != "required":
            return None
        found = self.keys.verify(self.settings.wyoming.key)
        if found is None:
            raise Unauthorized("the Wyoming server's key (TTS_WYOMING_KEY) is no longer a live key")
        return found

    def voice(self, chosen: SynthesizeVoice | None) -> Voice:
        """The request fields of a voice choice (name and speaker, or a language; none: the
        default voice), or the error that says why it cannot be had."""
        registry = self.wiring.registry
        if chosen is None or (chosen.name is None and not chosen.language):
            return Voice({})
        if chosen.name is None:
            assert chosen.language is not None
            if registry.for_language(chosen.language) is None:
                raise InvalidRequest(f"no voice speaks language {chosen.language!r}")
            return Voice({"language": chosen.language})
        spec = registry.get(chosen.name)
        resolve_speaker(spec, chosen.speaker)
        fields: dict[str, Any] = {"voice": spec.id}
        if chosen.speaker:
            fields["speaker"] = chosen.speaker
        return Voice(fields)

    def admit(self, address: str) -> Principal | None:
        """Count one synthesis against its tenant's rate (``RateLimited`` over it): the key's own
        rate, or with auth off ``TTS_RATE_LIMIT`` per client address (none when unset)."""
        who = self.principal()
        rate = who.rate if who is not None else self.settings.api.rate_limit
        tenant = rate_owner(who.id if who else None, address)
        if rate and rate != UNLIMITED and not self.rates.hit(tenant, rate):
            raise RateLimited(f"more submissions than this tenant's rate allows ({rate}); retry later")
        return who

    def submit(self, text: str, voice: Voice, who: Principal | None) -> TaskView:
        """Queue one sentence (or a whole text) as a streamed task of ``who``, through the same
        checks as an HTTP submission: quota, text and audio limits, the pool's limit, the cache."""
        check_quota(self.wiring.db, self.usage, who, self.settings.api)
        payload = {"text": text, "format": FORMAT, "text_type": TEXT_TYPE, **voice.fields}
        return self.wiring.tasks.submit(payload, owner=who.id if who else None, stream=True)

    def relay(self, view: TaskView, who: Principal | None) -> AudioRelay:
        """The reader of a submitted task's audio (its first piece within ``TTS_SYNC_WAIT_S``)."""
        return AudioRelay(self.wiring.tasks, view, who.id if who else None, self.settings.api.sync_wait_s)

    def keep(self, task_ids: list[str]) -> None:
        """The tasks' audio is still wanted (they wait their turn): their streams' reader marks are
        refreshed, so their workers go on streaming (``AudioStreams.READER_TTL_S``)."""
        if self.wiring.streams is not None:
            for task_id in task_ids:
                self.wiring.streams.attach(task_id)

    def drop(self, task_id: str, queued: bool) -> None:
        """A task whose audio nobody will read: its stream goes (the worker stops appending) and,
        ``queued`` (never read), it is cancelled if it still waits (best effort)."""
        try:
            if self.wiring.streams is not None:
                self.wiring.streams.delete(task_id)
            if queued:
                self.wiring.tasks.cancel(task_id)
        except TTSQueueError:
            pass  # it started meanwhile: it goes on into the cache
        except Exception as exc:  # noqa: BLE001 - the stream expires on its own
            log.warning("task %s: its stream was not dropped: %s", task_id, exc)

    @cached_property
    def info(self) -> Info:
        """What ``describe`` answers: every installed voice with its languages and speakers."""
        voices = [_voice_info(spec) for spec in self.wiring.registry.specs() if spec.present]
        program = TtsProgram(
            name="tts-queue", attribution=Attribution(name="tts-queue", url=self.settings.api.public_url),
            installed=True, description="text to speech behind a batched queue", version=version("tts-queue"),
            voices=voices, supports_synthesize_streaming=True)
        return Info(tts=[program])


def _voice_info(spec: VoiceSpec) -> TtsVoice:
    """One voice as Wyoming's ``info`` lists it."""
    speakers = [TtsVoiceSpeaker(name=name) for name in spec.speakers] or None
    return TtsVoice(name=spec.id, attribution=ATTRIBUTIONS.get(spec.family, PIPER), installed=True,
                    description=", ".join(spec.aliases) or spec.id, version=None,
                    languages=list(spec.spoken), speakers=speakers)
