"""The Japanese and Mandarin voices on every route, on real parts: a real worker process with the
real voices (Piper's default, Kokoro's five Japanese and, from the installed voice pack, its eight
Mandarin ones), Redis and SQLite, the app in process.

- Japanese text that names no voice goes to the default Japanese voice (``jf_alpha``), and the
  task says so; ``language`` picks a voice; a repeat is a cache hit;
- ``/v1/tts`` in every format, ``/tts`` (synchronous and streamed) and ``/v1/audio/speech`` give
  24 kHz Japanese speech as long as its morae take;
- a Japanese text book of two chapters renders chapter files, captions per sentence, an M4B and
  a read-along EPUB (every sentence in its overlay) that EPUBCheck passes;
- the voice lists carry family and languages;
- Mandarin text (with an English word in it) goes to the default Mandarin voice, a repeat is a
  cache hit, and a Mandarin text book of two 第N章 chapters renders with captions per sentence;
- a sentence in each language espeak-ng reads for Kokoro, naming only its language, is said by
  that language's first voice; a Spanish text book gets captions per word.
"""

from __future__ import annotations

import io
import re
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import pytest
from flask.testing import FlaskClient

from api import create_app
from tests.conftest import voice_packs
from tests.support import (
    ONE_THREAD,
    WorkerProcess,
    epubcheck,
    flush_queues,
    service_settings,
    wait_done,
    wait_until,
)
from workers.factory import make_celery

pytestmark = pytest.mark.integration
BOOK = """第一章 雨

雨が降った。静か。

第二章 鳥

鳥が鳴いた！
"""


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[FlaskClient]:
    data_dir = tmp_path_factory.mktemp("japanese")
    flush_queues(redis_url)
    settings = service_settings(data_dir, redis_url, None, TTS_SYNC_WAIT_S="60",  # the real voices
                                TTS_VOICES_DIR=str(voice_packs()), **ONE_THREAD)
    worker = WorkerProcess(settings, f"ja-{uuid.uuid4().hex[:6]}@localhost", data_dir / "worker.log")
    worker.wait_ready(make_celery(settings))
    yield create_app(settings).test_client()
    worker.stop()


def morae(text: str) -> int:
    import pyopenjtalk

    return sum(int(n["mora_size"]) for n in pyopenjtalk.run_frontend(text, use_sudachi_kanji_yomi=False))


def plausible(seconds: float, text: str) -> bool:
    """Japanese speech lasts about n/8 s for n morae: between n/12 and n/4 (plus pauses)."""
    n = morae(text)
    return n / 12 <= seconds <= n / 4 + 0.6


def decoded(data: bytes) -> tuple[float, int]:
    """Seconds and sample rate of encoded audio."""
    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.audio[0]
        samples = sum(int(frame.samples) for frame in container.decode(stream))
        return samples / stream.sample_rate, int(stream.sample_rate)


def test_japanese_text_goes_to_the_japanese_voice_and_a_repeat_is_a_cache_hit(client: FlaskClient) -> None:
    text = f"いい天気。{uuid.uuid4().int % 1000}本です。"
    # When Japanese text naming neither voice nor language is submitted
    submitted = client.post("/v1/tts", json={"text": text})
    assert submitted.status_code == 202, submitted.get_json()
    task = wait_done(client, submitted.get_json()["task_id"])
    # Then the default Japanese voice said it, and the task's JSON says which voice
    assert task["status"] == "done", task
    assert task["voice"] == "jf_alpha"
    audio = client.get(f"/v1/tasks/{task['task_id']}/audio")
    seconds, rate = decoded(audio.data)
    assert rate == 24000 and plausible(seconds, text) and abs(seconds - task["duration_s"]) < 0.01
    # And the same request again is answered from the cache at once
    again = client.post("/v1/tts", json={"text": text})
    assert again.status_code == 200 and again.get_json()["cache_hit"] is True
    # And language picks a voice for text in any script
    english = client.post("/v1/tts", json={"text": "Hi.", "language": "ja", "voice": "jm_kumo"})
    assert wait_done(client, english.get_json()["task_id"])["voice"] == "jm_kumo"


# (every format of Kokoro's audio is encoded in tests/real/test_real_kokoro.py; the route is the same for
# every family and every format: tests/service/test_openai.py tries each one end to end)
@pytest.mark.parametrize("fmt", ["flac", "opus"])
def test_every_format(client: FlaskClient, fmt: str) -> None:
    text = "はい。"
    submitted = client.post("/v1/tts", json={"text": text, "voice": "jf_tebukuro", "format": fmt})
    task = wait_done(client, submitted.get_json()["task_id"])
    assert task["status"] == "done", task
    seconds, _ = decoded(client.get(f"/v1/tasks/{task['task_id']}/audio").data)
    assert plausible(seconds, text)
    assert abs(seconds - task["duration_s"]) < (0.15 if fmt in ("mp3", "aac") else 0.07)


def test_synchronous_and_streamed_tts(client: FlaskClient) -> None:
    text = "行こう。公園だ。"
    # The synchronous form answers with the WAV itself
    now = client.post("/tts?wait=60", json={"text": text, "voice": "jf_gongitsune"})
    assert now.status_code == 200 and now.mimetype == "audio/wav"
    seconds, rate = decoded(now.data)
    assert rate == 24000 and plausible(seconds, text)
    # And the streamed form sends the same speech as it is made
    streamed = client.post("/tts?stream=1", json={"text": text, "voice": "jf_gongitsune", "format": "mp3"})
    assert streamed.status_code == 200, streamed.get_data(as_text=True)[:200]
    assert abs(decoded(streamed.data)[0] - seconds) < 0.15


def test_openai_speech_speaks_japanese_with_an_installed_voice(client: FlaskClient) -> None:
    text = "新機能。"
    response = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "jf_nezumi", "input": text,
                                                     "response_format": "mp3"})
    assert response.status_code == 200, response.get_data(as_text=True)[:200]
    task = client.get(f"/v1/tasks/{response.headers['X-Task-ID']}").get_json()
    assert task["voice"] == "jf_nezumi"
    seconds, rate = decoded(response.data)
    assert rate == 24000 and plausible(seconds, text)


def test_a_japanese_text_book_renders_two_chapters_with_character_cues_and_a_readalong_epub(
        client: FlaskClient, tmp_path: Path) -> None:
    # Given a text book in Japanese with two 第N章 chapters and no voice named
    created = client.post("/v1/books", json={"text": BOOK, "input_format": "text", "format": "mp3"})
    assert created.status_code == 202, created.get_json()
    book_id = created.get_json()["book_id"]

    def finished() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/v1/books/{book_id}").get_json()
        return body if body["status"] in ("done", "failed", "cancelled") else None

    book = wait_until(finished, timeout=300, interval=0.5)
    # Then both chapters are rendered, each sentence split at 。 and ！
    assert book["status"] == "done", book
    assert book["chapters_total"] == book["chapters_done"] == 2
    manifest = client.get(f"/v1/books/{book_id}/manifest").get_json()
    assert [c["title"] for c in manifest["chapters"]] == ["第一章 雨", "第二章 鳥"]
    texts = [s["text"] for c in manifest["chapters"] for s in c["sentences"]]
    assert texts == ["第一章 雨", "雨が降った。", "静か。", "第二章 鳥", "鳥が鳴いた！"]  # titles are said
    for chapter in manifest["chapters"]:
        audio = client.get(f"/v1/books/{book_id}/chapters/{chapter['number']}/audio")
        seconds, rate = decoded(audio.data)
        assert rate == 24000 and abs(seconds - chapter["duration_s"]) < 0.15
        # captions: a cue per sentence at least, the Japanese text as written, tiling the audio
        captions = client.get(f"/v1/books/{book_id}/chapters/{chapter['number']}/captions.srt")
        srt = captions.get_data(as_text=True)
        cues = [line for line in srt.splitlines() if " --> " in line]
        shown = "".join(srt.splitlines()[2::4]).replace(" ", "")
        assert len(cues) >= len(chapter["sentences"])
        assert all(s["text"].replace(" ", "") in shown for s in chapter["sentences"]), srt  # cut at spaces
    # And its cues are per character, timed by morae (the kanji of a word sharing its reading's)
    srt = client.get(f"/v1/books/{book_id}/chapters/1/captions.srt").get_data(as_text=True)
    assert srt.splitlines()[2::4] == ["第", "一", "章", "雨", "雨", "が", "降", "っ", "た。", "静",
                                      "か。"], srt
    m4b = client.get(f"/v1/books/{book_id}/audiobook.m4b")
    assert m4b.status_code == 200
    with av.open(io.BytesIO(m4b.data), "r") as container:
        assert len(container.chapters()) == 2
    # And its read-along EPUB is Japanese, every sentence in the overlay, and EPUBCheck finds
    # nothing to report
    assert client.get(f"/v1/books/{book_id}/readalong.epub").status_code in (200, 202)
    epub = wait_until(lambda: (r := client.get(f"/v1/books/{book_id}/readalong.epub")).status_code == 200
                      and r.data, timeout=120, interval=0.5)
    path = tmp_path / "japanese.epub"
    path.write_bytes(epub)
    with zipfile.ZipFile(path) as archive:
        assert "<dc:language>ja</dc:language>" in archive.read("OEBPS/package.opf").decode()
        smil = archive.read("OEBPS/chapter-001.smil").decode()
    overlaid = set(re.findall(r'src="chapter-001.xhtml#(s\d+)', smil))
    assert len(overlaid) == len(manifest["chapters"][0]["sentences"])
    assert epubcheck(path) == []


ZH_BOOK = """第一章 雨

下雨了。很安静；我们回家吧。

第二章 鸟

鸟在叫！
"""


def test_mandarin_text_goes_to_the_mandarin_voice_and_a_book_renders_with_a_cue_per_character(
        client: FlaskClient) -> None:
    text = f"Hello，今天天气真不错！我有{uuid.uuid4().int % 1000}本书。"
    # When Mandarin text with an English word, naming neither voice nor language, is submitted
    submitted = client.post("/v1/tts", json={"text": text})
    assert submitted.status_code == 202, submitted.get_json()
    task = wait_done(client, submitted.get_json()["task_id"])
    # Then the default Mandarin voice said it, as long as its syllables take (about 4-7 a second)
    assert task["status"] == "done" and task["voice"] == "zf_xiaoxiao", task
    seconds, rate = decoded(client.get(f"/v1/tasks/{task['task_id']}/audio").data)
    syllables = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff") + 2 + 3  # Hello, the number's
    assert rate == 24000 and syllables / 8 <= seconds <= syllables / 3 + 0.6, seconds
    # And the same request again is answered from the cache at once
    again = client.post("/v1/tts", json={"text": text})
    assert again.status_code == 200 and again.get_json()["cache_hit"] is True
    # And a Mandarin text book renders its two chapters, split at 。；！, each with captions
    created = client.post("/v1/books", json={"text": ZH_BOOK, "input_format": "text", "format": "mp3"})
    assert created.status_code == 202, created.get_json()
    book_id = created.get_json()["book_id"]

    def finished() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/v1/books/{book_id}").get_json()
        return body if body["status"] in ("done", "failed", "cancelled") else None

    book = wait_until(finished, timeout=300, interval=0.5)
    assert book["status"] == "done" and book["chapters_done"] == 2, book
    manifest = client.get(f"/v1/books/{book_id}/manifest").get_json()
    texts = [s["text"] for c in manifest["chapters"] for s in c["sentences"]]
    assert texts == ["第一章 雨", "下雨了。", "很安静；", "我们回家吧。", "第二章 鸟", "鸟在叫！"]
    for chapter in manifest["chapters"]:
        audio = client.get(f"/v1/books/{book_id}/chapters/{chapter['number']}/audio")
        assert abs(decoded(audio.data)[0] - chapter["duration_s"]) < 0.15
        captions = client.get(f"/v1/books/{book_id}/chapters/{chapter['number']}/captions.srt")
        srt = captions.get_data(as_text=True)
        shown = "".join(srt.splitlines()[2::4])  # a title's cue is cut at its space
        assert all(s["text"].replace(" ", "") in shown for s in chapter["sentences"]), srt
    # And its cues are per character: each Han character is a syllable, timed from the model's
    # durations (the marks after a character shown with it)
    srt = client.get(f"/v1/books/{book_id}/chapters/1/captions.srt").get_data(as_text=True)
    assert srt.splitlines()[2::4] == ["第", "一", "章", "雨", "下", "雨", "了。", "很", "安", "静；",
                                      "我", "们", "回", "家", "吧。"], srt


LANGUAGES = [("en-GB", "bf_emma", "Good morning."), ("es", "ef_dora", "Buenos días."),
             ("fr", "ff_siwis", "Bonjour."), ("it", "if_sara", "Buongiorno."),
             ("pt-BR", "pf_dora", "Bom dia."), ("hi", "hf_alpha", "नमस्ते।"),
             ("en-US", "en_US-joe-medium", "Good morning.")]
ES_BOOK = """Capítulo 1

En un lugar de la Mancha vivía un hidalgo.

Capítulo 2

Tenía 25 años y un caballo flaco.
"""


def test_every_language_through_post_tts_and_a_spanish_book_with_word_cues(client: FlaskClient) -> None:
    # When a sentence in each language is submitted naming only its language
    submitted = {voice: client.post("/v1/tts", json={"text": text, "language": language})
                 for language, voice, text in LANGUAGES}
    # Then each is said by its language's first voice, at its sample rate, as long as a greeting
    for voice, response in submitted.items():
        assert response.status_code == 202, response.get_json()
        task = wait_done(client, response.get_json()["task_id"])
        assert task["status"] == "done" and task["voice"] == voice, task
        seconds, rate = decoded(client.get(f"/v1/tasks/{task['task_id']}/audio").data)
        assert rate == (22050 if voice == "en_US-joe-medium" else 24000), voice
        assert 0.4 <= seconds <= 3.0, (voice, seconds)
    # And a Spanish text book read by a Spanish voice has a cue per word, not per sentence
    created = client.post("/v1/books", json={"text": ES_BOOK, "input_format": "text", "voice": "em_alex"})
    assert created.status_code == 202, created.get_json()
    book_id = created.get_json()["book_id"]

    def finished() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/v1/books/{book_id}").get_json()
        return body if body["status"] in ("done", "failed", "cancelled") else None

    book = wait_until(finished, timeout=300, interval=0.5)
    assert book["status"] == "done" and book["chapters_done"] == 2, book
    srt = client.get(f"/v1/books/{book_id}/chapters/2/captions.srt").get_data(as_text=True)
    shown = srt.splitlines()[2::4]
    assert [c["title"] for c in client.get(f"/v1/books/{book_id}/manifest").get_json()["chapters"]] == [
        "Capítulo 1", "Capítulo 2"]
    assert shown[-7:] == ["Tenía", "25", "años", "y", "un", "caballo", "flaco."], srt


def test_voice_lists_carry_family_and_languages(client: FlaskClient) -> None:
    voices = {v["id"]: v for v in client.get("/v1/voices").get_json()["voices"]}
    assert voices["jf_alpha"]["family"] == "kokoro" and voices["jf_alpha"]["languages"] == ["ja"]
    assert voices["jf_alpha"]["sample_rate"] == 24000
    assert voices["en_US-joe-medium"]["family"] == "piper"
    named = {v["id"]: v for v in client.get("/v1/audio/voices").get_json()["voices"]}
    assert named["jm_kumo"]["family"] == "kokoro" and named["jm_kumo"]["languages"] == ["ja"]
    page = client.get("/").get_data(as_text=True)
    assert "jf_alpha (ja, Kokoro-82M, 24000 Hz), grade C+" in page and 'value="" selected' in page
    assert '<optgroup label="Japanese">' in page and '<optgroup label="Mandarin">' in page
    assert voices["jf_alpha"]["grade"] == "C+" and voices["en_US-joe-medium"]["grade"] is None
    # And OpenAI's names that the voice pack has a voice of speak with it (the rest: the default)
    assert named["alloy"]["voice"] == "af_alloy" and named["fable"]["voice"] == "bm_fable"
    assert named["shimmer"]["voice"] == "en_US-joe-medium"
    assert voices["zm_yunxi"]["languages"] == ["zh"] and "zm_yunxi" in named


def test_cycling_kokoro_voices_keeps_the_default_voice_loaded(client: FlaskClient) -> None:
    # Given a worker that keeps two models loaded (the default), its default Piper voice warm, and
    # whatever Kokoro voices the tests before asked for
    log = client.application.extensions["tts"].settings.data_dir / "worker.log"
    tag = uuid.uuid4().hex[:4]
    kana = "".join("あいうえおかきくけこさしすせそた"[int(digit, 16)] for digit in tag)  # a new text, short
    # When two Kokoro voices in turn (as many as the places), then the default voice, are asked for
    for body in ({"text": f"{kana}。", "voice": "jf_nezumi"}, {"text": f"{kana}。", "voice": "jm_kumo"},
                 {"text": f"Hello {tag}."}):
        task = wait_done(client, client.post("/v1/tts", json=body).get_json()["task_id"])
        assert task["status"] == "done", task
    # Then the default voice was loaded once, at the worker's start: the Kokoro voices, sharing
    # one graph, took one place between them instead of pushing it out (two voices of two places)
    assert log.read_text(errors="replace").count("loaded en_US-joe-medium.onnx on") == 1
