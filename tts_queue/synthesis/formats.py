"""The one table of output formats: each format's MIME type and suffix and how it is written
(soundfile's format, or PyAV's container, codec and options), and the format names a request may use.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from tts_queue.enums import REQUEST_FORMATS
from tts_queue.errors import UnsupportedFormat

# How each format's bytes are written, where it changed since the first version: part of the cache
# key of a request in that format (``synthesis.request.cache_key``), so a file written the old way
# is never served (2: MP3 without ID3v2 and Xing/Info, to be joined by concatenation).
ENCODINGS = {"mp3": 2}


@dataclass(frozen=True)
class AudioFormat:
    """How one output format is written: MIME type and suffix, then either soundfile's format and
    subtype (exact and fast: WAV, FLAC, Ogg Vorbis) or PyAV's container, codec and bit rate."""

    name: str
    mime_type: str
    suffix: str
    soundfile: tuple[str, str] | None = None  # (format, subtype)
    container: str = ""
    codec: str = ""
    bit_rate: int | None = None
    sample_rate: int | None = None  # fixed output rate (Opus runs at 48 kHz), else the input's
    options: tuple[tuple[str, str], ...] = ()  # muxer options
    codec_options: tuple[tuple[str, str], ...] = ()  # encoder options


FORMATS: dict[str, AudioFormat] = {
    "wav": AudioFormat("wav", "audio/wav", ".wav", soundfile=("WAV", "PCM_16")),
    "flac": AudioFormat("flac", "audio/flac", ".flac", soundfile=("FLAC", "PCM_16")),
    "ogg": AudioFormat("ogg", "audio/ogg", ".ogg", soundfile=("OGG", "VORBIS")),
    # LAME quality 7 ("fast, ok quality"): 1.75x the speed of FFmpeg's default (quality 3) here,
    # with no audible difference on speech at 64 kb/s. Frames only, no per-file metadata (an ID3v2
    # tag, a Xing/Info frame; an ID3v1 tag is off by default): clients join answers by concatenation
    # (LibreChat a long text's parts, Home Assistant a pipelined reply), and a tag or an info frame
    # in the middle of the joined file is junk a player may stop at. Constant bit rate, so a player
    # still knows the duration from the size.
    "mp3": AudioFormat("mp3", "audio/mpeg", ".mp3", container="mp3", codec="libmp3lame", bit_rate=64_000,
                       options=(("id3v2_version", "0"), ("write_xing", "0"), ("write_id3v1", "0")),
                       codec_options=(("compression_level", "7"),)),
    "opus": AudioFormat("opus", "audio/ogg", ".opus", container="ogg", codec="libopus", bit_rate=32_000,
                        sample_rate=48_000),
    "aac": AudioFormat("aac", "audio/aac", ".aac", container="adts", codec="aac", bit_rate=64_000),
    "m4a": AudioFormat("m4a", "audio/mp4", ".m4a", container="ipod", codec="aac", bit_rate=64_000),
    # Raw 16-bit little-endian mono at 24 kHz, as OpenAI's speech API documents its "pcm".
    "pcm": AudioFormat("pcm", "audio/pcm", ".pcm", container="s16le", codec="pcm_s16le", sample_rate=24_000),
}
# How a format is written while it is being sent: each writes forward only (no header rewritten at
# the end), so the bytes sent so far are the start of the file that is stored. FLAC goes through
# FFmpeg's encoder (lossless: the same samples as soundfile's); Opus closes an Ogg page every
# 60 ms instead of every second, so a sentence's audio leaves with it.
STREAMED: dict[str, AudioFormat] = {
    "flac": AudioFormat("flac", "audio/flac", ".flac", container="flac", codec="flac"),
    "opus": dataclasses.replace(FORMATS["opus"], options=(("page_duration", "60000"),)),
}
# Audiobook brand, and the index moved to the front so players can seek before the file is all there.
# FFmpeg's "fast" AAC coder, not its default "twoloop": less CPU for the book's tail (its M4B is
# encoded after its last sentence), the same size, and closer to the source (`python -m bench run
# m4b_coder`; the figures: bench/HISTORY.md, "the fast AAC coder").
M4B = AudioFormat("m4b", "audio/mp4", ".m4b", container="ipod", codec="aac", bit_rate=64_000,
                  options=(("brand", "M4B "), ("movflags", "+faststart")),
                  codec_options=(("aac_coder", "fast"),))


def check_format(name: str | None, default: str = "wav",
                 allowed: tuple[str, ...] = REQUEST_FORMATS) -> str:
    """A format name among ``allowed`` (lower case), or ``UnsupportedFormat`` listing them."""
    fmt = (name or default).lower()
    if fmt not in allowed:
        raise UnsupportedFormat(f"unsupported format {name!r}; use one of {', '.join(allowed)}")
    return fmt


def audio_format(name: str) -> AudioFormat:
    """The format called ``name`` (any case), or ``UnsupportedFormat``."""
    return FORMATS[check_format(name, allowed=tuple(FORMATS))]


def mime_type(fmt: str) -> str:
    """The MIME type served for a format."""
    return audio_format(fmt).mime_type
