"""Audio values and the one encoder's table: joining sentences, int16 conversion, lossless and
Vorbis files through soundfile, compressed formats through PyAV, one format check."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from tts_queue.enums import BOOK_FORMATS, REQUEST_FORMATS
from tts_queue.errors import InvalidRequest, UnsupportedFormat
from tts_queue.synthesis import formats
from tts_queue.synthesis.audio import Audio
from tts_queue.synthesis.encoder import encode
from tts_queue.synthesis.formats import check_format, mime_type

RATE = 8000


def tone(seconds: float = 0.25, rate: int = RATE) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def test_join_puts_silence_between_sentences_only() -> None:
    # Given three sentences and 10 ms of silence at 1 kHz (10 samples)
    parts = [np.full(3, 0.5, np.float32), np.full(2, -0.5, np.float32),
             np.full(4, 0.25, np.float32)]
    # When they are joined
    audio = Audio.join(parts, 1000, silence_ms=10)
    # Then there are two gaps of 10 zero samples, none at the ends
    assert len(audio.samples) == 3 + 10 + 2 + 10 + 4
    np.testing.assert_array_equal(audio.samples[:3], parts[0])
    assert not audio.samples[3:13].any()
    np.testing.assert_array_equal(audio.samples[13:15], parts[1])
    assert not audio.samples[15:25].any()
    np.testing.assert_array_equal(audio.samples[25:], parts[2])
    assert audio.samples.dtype == np.float32
    assert audio.duration_s == pytest.approx(29 / 1000)


def test_join_of_one_part_or_none() -> None:
    # Given a single sentence, and then no sentences
    one = Audio.join([np.ones(5, np.float32)], RATE, silence_ms=200)
    none = Audio.join([], RATE, silence_ms=200)
    # Then one part is unchanged and no parts is empty audio
    np.testing.assert_array_equal(one.samples, np.ones(5))
    assert len(none.samples) == 0 and none.duration_s == 0
    # And float64 input comes out as float32
    float64 = [np.ones(3)]
    assert Audio.join(float64, RATE, 0).samples.dtype == np.float32  # type: ignore[arg-type]


def test_to_int16_scales_and_clips() -> None:
    # Given samples inside and outside [-1, 1]
    audio = Audio(np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0], np.float32), RATE)
    # When they become 16-bit PCM
    pcm = audio.to_int16()
    # Then they are scaled by 32767, rounded to the nearest step and clipped instead of wrapping around
    assert pcm.dtype == np.int16
    assert pcm.tolist() == [-32767, -32767, -16384, 0, 16384, 32767, 32767]


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_lossless_formats_read_back_exactly(fmt: str) -> None:
    # Given a tone
    audio = Audio(tone(), RATE)
    # When it is encoded
    data = encode(audio, fmt)
    # Then soundfile reads back the same int16 samples, rate and length
    samples, rate = soundfile.read(io.BytesIO(data), dtype="int16")
    assert rate == RATE
    np.testing.assert_array_equal(samples, audio.to_int16())
    info = soundfile.info(io.BytesIO(data))
    assert info.format == fmt.upper()
    assert info.subtype == "PCM_16"


def test_ogg_vorbis_reads_back_with_the_same_rate_and_length() -> None:
    # Given a tone of 0.25 s
    audio = Audio(tone(), RATE)
    # When it is encoded as Ogg Vorbis (lossy)
    data = encode(audio, "OGG")
    # Then it reads back as Vorbis with the same rate and length and a similar level
    info = soundfile.info(io.BytesIO(data))
    assert (info.format, info.subtype) == ("OGG", "VORBIS")
    samples, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    assert rate == RATE
    assert len(samples) == len(audio.samples)
    rms = float(np.sqrt(np.mean(samples**2)))
    assert rms == pytest.approx(0.5 / np.sqrt(2), rel=0.2)


def test_format_names() -> None:
    # Given format names in any case, or none
    # Then they normalize to the supported lower-case names with their MIME types
    assert check_format("WAV") == "wav"
    assert check_format(None) == "wav"
    assert check_format(None, default="flac") == "flac"
    assert mime_type("ogg") == "audio/ogg"
    assert mime_type("Flac") == "audio/flac"
    # And a name outside the allowed set is a 400 listing them (books allow no ogg)
    with pytest.raises(UnsupportedFormat, match="wav") as info:
        check_format("mp4")
    assert isinstance(info.value, InvalidRequest)
    with pytest.raises(UnsupportedFormat, match="mp3"):
        check_format("ogg", allowed=BOOK_FORMATS)


def test_requests_may_ask_for_compressed_formats_through_the_one_encoder() -> None:
    # Given the request formats, declared once (tts_queue.enums) and used by the settings too
    from tts_queue.settings import RequestSettings

    choices = next(f.metadata["choices"] for f in __import__("dataclasses").fields(RequestSettings)
                   if f.name == "default_format")
    # Then they include mp3, opus and aac with their MIME types, every one is in the encoder's
    # table, and the setting's choices are the same tuple
    assert choices is REQUEST_FORMATS and set(REQUEST_FORMATS) | set(BOOK_FORMATS) <= set(formats.FORMATS)
    assert check_format("MP3") == "mp3" and mime_type("opus") == "audio/ogg"
    assert mime_type("aac") == "audio/aac" and mime_type("mp3") == "audio/mpeg"
    # And each encodes a tone into a file of the right kind
    audio = Audio(tone(), RATE)
    mp3 = encode(audio, "mp3")
    assert mp3[0] == 0xFF and mp3[1] & 0xE0 == 0xE0  # an MPEG audio frame first: no ID3 tag before it
    assert encode(audio, "opus")[:4] == b"OggS"
    assert encode(audio, "wav")[:4] == b"RIFF"
