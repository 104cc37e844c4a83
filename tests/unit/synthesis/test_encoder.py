"""The encoder: every format decodes back to the same audio, and M4B chapter marks read back."""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from pathlib import Path

import av
import numpy as np
import pytest

from tts_queue.books.render.m4b import write_m4b
from tts_queue.enums import STREAM_FORMATS
from tts_queue.errors import InvalidRequest, UnsupportedFormat
from tts_queue.synthesis.audio import Audio
from tts_queue.synthesis.encoder import BLOCK_SAMPLES, StreamEncoder, decode_blocks, encode, open_writer
from tts_queue.synthesis.formats import FORMATS, M4B, audio_format

RATE = 22050
# format -> (decoder name, decoded sample rate, allowed length error in output samples)
EXPECTED = {
    "mp3": ("mp3float", 22050, 2 * 576 + 1105),  # no LAME tag (files join by concatenation): its delay stays
    "opus": ("opus", 48000, 2 * 960),
    "aac": ("aac", 22050, 2 * 1024),
    "m4a": ("aac", 22050, 2 * 1024),
    "flac": ("flac", 22050, 0),
    "wav": ("pcm_s16le", 22050, 0),
}


def tone(seconds: float, freq: float = 440.0, rate: int = RATE) -> Audio:
    t = np.arange(int(seconds * rate)) / rate
    return Audio((0.4 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate)


def decode(data: bytes) -> tuple[str, int, np.ndarray]:
    """Decoder name, sample rate and mono float samples of an encoded file."""
    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.audio[0]
        frames = []
        for frame in container.decode(stream):
            scale = 32768.0 if frame.format.name.startswith("s16") else 1.0
            frames.append(frame.to_ndarray().reshape(-1) / scale)
        return stream.codec_context.name, stream.sample_rate, np.concatenate(frames).astype(np.float32)


def dominant_frequency(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[int(np.argmax(spectrum))])


def test_the_format_table() -> None:
    # Given the formats the service writes
    # Then each has a MIME type and a file suffix, and the M4B is AAC in MP4
    assert set(FORMATS) == {"mp3", "opus", "aac", "m4a", "flac", "wav", "ogg", "pcm"}
    assert {f.mime_type for f in FORMATS.values()} >= {"audio/mpeg", "audio/ogg", "audio/aac", "audio/wav"}
    assert all(f.suffix == f".{name}" for name, f in FORMATS.items())
    assert (M4B.codec, M4B.suffix) == ("aac", ".m4b")
    assert audio_format("MP3").name == "mp3"
    with pytest.raises(UnsupportedFormat):
        audio_format("ogg-vorbis")


@pytest.mark.parametrize("fmt", sorted(EXPECTED))
def test_each_format_decodes_back_to_the_same_sound(fmt: str) -> None:
    # Given 1.5 s of a 440 Hz tone at 22,050 Hz
    audio = tone(1.5)
    # When it is encoded and decoded with PyAV
    decoder, rate, samples = decode(encode(audio, fmt))
    name, expected_rate, slack = EXPECTED[fmt]
    # Then the codec and rate are the expected ones (Opus resampled to 48 kHz)
    assert (decoder, rate) == (name, expected_rate)
    # And the duration is within two codec frames of the original
    assert abs(len(samples) - 1.5 * rate) <= slack
    # And it is still a 440 Hz tone
    assert dominant_frequency(samples, rate) == pytest.approx(440, abs=2)


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_lossless_formats_keep_the_samples(fmt: str) -> None:
    # Given a tone
    audio = tone(0.5)
    # Then WAV and FLAC give back the samples to 16-bit precision
    _, _, samples = decode(encode(audio, fmt))
    np.testing.assert_allclose(samples, audio.samples, atol=1 / 32767 + 1e-6)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_file_written_in_pieces_is_the_file_encoded_whole(fmt: str, tmp_path: Path) -> None:
    # Given 2 s of a tone, cut into uneven pieces (some empty, some longer than a frame)
    audio = tone(2.0)
    rng = np.random.default_rng(7)
    cuts = np.sort([*rng.integers(0, len(audio.samples), 12), BLOCK_SAMPLES + 5, BLOCK_SAMPLES + 5])
    pieces = np.split(audio.samples, cuts)
    # When the pieces are streamed into a file on disk one by one
    path = tmp_path / f"out{FORMATS[fmt].suffix}"
    with open_writer(path, fmt, RATE) as writer:
        for piece in pieces:
            writer.write(piece)
    # Then it decodes to exactly what encoding the whole audio at once gives (the bytes differ only
    # where Ogg draws a random stream serial number)
    whole = encode(audio, fmt)
    if fmt not in ("ogg", "opus"):
        assert path.read_bytes() == whole
    if fmt != "pcm":  # raw samples: no container to decode, the bytes above are the check
        assert np.array_equal(decode(path.read_bytes())[2], decode(whole)[2])


def test_pcm_is_raw_16_bit_mono_at_24_khz_as_openai_documents() -> None:
    # Given 1.5 s of a 440 Hz tone at 22,050 Hz
    audio = tone(1.5)
    # When it is encoded as pcm
    data = encode(audio, "pcm")
    # Then it is headerless 16-bit little-endian samples at 24 kHz: 1.5 s long, still 440 Hz
    samples = np.frombuffer(data, "<i2").astype(np.float32) / 32768
    assert abs(len(samples) - 36000) <= 64
    assert abs(dominant_frequency(samples, 24000) - 440) < 5
    assert FORMATS["pcm"].mime_type == "audio/pcm"


@pytest.mark.parametrize("fmt", sorted(STREAM_FORMATS))
def test_a_streamed_file_is_sent_as_it_is_encoded_and_is_the_file_stored(fmt: str) -> None:
    # Given 3 s of a tone arriving as three sentences of 1 s
    audio = tone(3.0)
    store = io.BytesIO()
    encoder = StreamEncoder(fmt, RATE, store)
    # When each piece is written as it comes (into the file to store, and handed out)
    sent = [encoder.write(piece) for piece in np.split(audio.samples, [RATE, 2 * RATE])]
    tail = encoder.close()
    stored = store.getvalue()
    streamed = b"".join(sent) + tail
    # Then audio leaves with the first second already, not only at the end
    assert len(sent[0]) > 0.2 * len(streamed)
    if fmt == "wav":
        # a WAV is sent with its sizes unknown and stored with the real ones: the same samples,
        # exactly those a whole-file encode writes
        assert streamed[4:8] == b"\xff\xff\xff\xff" and streamed[44:] == stored[44:]
        assert decode(stored)[2].tolist() == decode(encode(audio, "wav"))[2].tolist()
        assert np.array_equal(decode(streamed)[2], decode(stored)[2])
        return
    # every other format is sent as the very bytes stored
    assert streamed == stored
    if fmt == "pcm":
        assert stored == encode(audio, "pcm")
        return
    _, rate, samples = decode(stored)
    slack = EXPECTED[fmt][2]
    assert abs(len(samples) - 3.0 * rate) <= slack * rate / RATE


def mp3_metadata(data: bytes) -> list[str]:
    """The per-file metadata an MP3 holds: an ID3v2 tag at its start, a Xing or Info frame (in the
    first frame), an ID3v1 tag at its end."""
    found = ["ID3v2"] if data[:3] == b"ID3" else []
    found += [name for name in ("Xing", "Info") if name.encode() in data[:1000]]
    return found + (["ID3v1"] if data[-128:-125] == b"TAG" else [])


def streamed_mp3(audio: Audio) -> bytes:
    encoder = StreamEncoder("mp3", audio.sample_rate, io.BytesIO())
    return encoder.write(audio.samples) + encoder.close()


@pytest.mark.parametrize("made", ["whole", "streamed"])
def test_mp3s_joined_end_to_end_decode_to_the_sum_of_their_lengths(made: str) -> None:
    # Given two MP3s of different lengths, each a whole answer (as a file or as a stream)
    first, second = tone(1.3, 440), tone(0.7, 660)
    write = (lambda audio: encode(audio, "mp3")) if made == "whole" else streamed_mp3
    a, b = write(first), write(second)
    # Then neither carries per-file metadata (a tag or an info frame that would sit mid-file when joined)
    assert mp3_metadata(a) == mp3_metadata(b) == []
    assert mp3_metadata(encode(first, "mp3") + b"TAG" + bytes(125)) == ["ID3v1"]  # the check sees one
    # And the two concatenated decode to the sum of their decoded lengths, within one frame (576 samples)
    joined = len(decode(a + b)[2])
    assert abs(joined - (len(decode(a)[2]) + len(decode(b)[2]))) <= 576
    assert abs(joined - (len(first.samples) + len(second.samples))) <= 2 * (1105 + 576)


def test_ogg_vorbis_cannot_be_streamed() -> None:
    with pytest.raises(UnsupportedFormat):
        StreamEncoder("ogg", RATE, io.BytesIO())


def test_decode_blocks_reads_a_file_frame_by_frame(tmp_path: Path) -> None:
    # Given an MP3 of 1.5 s on disk
    path = tmp_path / "a.mp3"
    path.write_bytes(encode(tone(1.5), "mp3"))
    # When it is decoded block by block
    blocks = list(decode_blocks(path))
    # Then every block is one codec frame (576 samples at 22,050 Hz) at the file's rate, and
    # together they are the sound
    assert {b.sample_rate for b in blocks} == {RATE} and max(len(b.samples) for b in blocks) == 576
    samples = np.concatenate([b.samples for b in blocks])
    assert np.array_equal(samples, decode(path.read_bytes())[2])


def test_clipping_and_bad_input() -> None:
    # Given samples far outside [-1, 1] and a NaN
    loud = Audio(np.array([3.0, -3.0, np.nan] * 1000, np.float32), RATE)
    # Then they are clipped instead of wrapping around
    _, _, samples = decode(encode(loud, "wav"))
    assert samples.max() <= 1.0 and samples.min() >= -1.0 and np.isfinite(samples).all()
    # And no audio, or an unknown format, is refused
    with pytest.raises(InvalidRequest):
        encode(Audio(np.zeros(0, np.float32), RATE), "mp3")
    with pytest.raises(UnsupportedFormat):
        encode(tone(0.1), "aiff")


def test_m4b_has_chapter_marks_that_read_back(tmp_path: Path) -> None:
    # Given three chapters of 1.0, 2.5 and 0.75 s, produced lazily one at a time, two as blocks
    lengths = [1.0, 2.5, 0.75]

    def blocks(audio: Audio, size: int) -> Iterator[Audio]:
        for start in range(0, len(audio.samples), size):
            yield Audio(audio.samples[start:start + size], audio.sample_rate)

    def chapters() -> Iterator[tuple[str, Audio | Iterator[Audio]]]:
        for number, seconds in enumerate(lengths, start=1):
            audio = tone(seconds, 300 + 100 * number)
            # a whole chapter, then chapters as blocks of uneven sizes
            yield f"Chapter {number}", audio if number == 1 else blocks(audio, 1000 * number + 7)

    # When they are written as an M4B with 500 ms between chapters
    path = tmp_path / "book.m4b"
    marks = write_m4b(path, chapters(), title="Tiny Tales", author="A. Writer", chapter_gap_ms=500)
    # Then the returned marks follow the layout: each chapter plus the gap, the last without
    assert [m.title for m in marks] == ["Chapter 1", "Chapter 2", "Chapter 3"]
    assert [t for m in marks for t in (m.start_s, m.end_s)] == pytest.approx(
        [0.0, 1.5, 1.5, 4.5, 4.5, 5.25], abs=1 / RATE)
    # And the file reads back with the same chapter marks, titles and book metadata
    with av.open(str(path)) as container:
        read = container.chapters()
        assert [c["metadata"]["title"] for c in read] == ["Chapter 1", "Chapter 2", "Chapter 3"]
        starts = [float(c["start"] * c["time_base"]) for c in read if c["time_base"] is not None]
        ends = [float(c["end"] * c["time_base"]) for c in read if c["time_base"] is not None]
        assert starts == pytest.approx([0.0, 1.5, 4.5], abs=0.002)
        assert ends == pytest.approx([1.5, 4.5, 5.25], abs=0.002)
        assert container.metadata["title"] == "Tiny Tales"
        assert container.metadata["artist"] == "A. Writer"
        assert container.metadata["major_brand"].strip() == "M4B"
    # And the audio lasts the whole book, within two AAC frames
    decoder, rate, samples = decode(path.read_bytes())
    assert decoder == "aac" and abs(len(samples) - 5.25 * rate) <= 2 * 1024
    # And no temporary file is left beside it
    assert [p.name for p in tmp_path.iterdir()] == ["book.m4b"]


def test_m4b_refuses_mixed_rates_and_leaves_nothing(tmp_path: Path) -> None:
    # Given chapters at two sample rates (the second in blocks), and then no chapters
    mixed: list[tuple[str, Audio | Iterable[Audio]]] = [("One", tone(0.2)),
                                                        ("Two", iter([tone(0.1, rate=16000)]))]
    # Then writing fails with InvalidRequest and leaves no file, complete or partial
    with pytest.raises(InvalidRequest):
        write_m4b(tmp_path / "x.m4b", mixed)
    with pytest.raises(InvalidRequest):
        write_m4b(tmp_path / "y.m4b", [])
    with pytest.raises(InvalidRequest):
        write_m4b(tmp_path / "z.m4b", [("Empty", iter([]))])
    assert list(tmp_path.iterdir()) == []
