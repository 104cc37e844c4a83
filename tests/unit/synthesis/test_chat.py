"""Chat Markdown read as a person reads it (``text_type: "markdown"``): no syntax is said, URLs are
their host names, what is not Markdown keeps the normalizer's reading, SSML stays SSML, the cache
key and the audio estimate follow what is said, and the reading is linear on hostile input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import load_voice
from tests.support.chat_answers import ANSWERS, ChatAnswer
from tests.support.linear import assert_linear
from tests.support.tiny_voice import write_voice
from tts_queue.errors import EmptyText, NothingToSpeak
from tts_queue.settings import Settings
from tts_queue.synthesis.estimate.duration import estimated_seconds
from tts_queue.synthesis.frontend.chat import read_markdown
from tts_queue.synthesis.frontend.text import Phonemizer
from tts_queue.synthesis.registry import VoiceRegistry, discover_specs
from tts_queue.synthesis.request import SynthesisRequest, build_request, cache_key

DIGEST = "d" * 64
# Words a reader never says for Markdown or a URL's path (espeak-ng's own readings of the marks).
NEVER_SAID = ("asterisk", "hashtag", "slash", "underscore", "backtick", "pipe", "bar")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> VoiceRegistry:
    directory = tmp_path_factory.mktemp("chat-voices")
    write_voice(directory, "tiny")
    return VoiceRegistry(discover_specs(directory), loader=load_voice, default="tiny")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"TTS_DATA_DIR": str(tmp_path)})


def read(text: str, registry: VoiceRegistry, settings: Settings,
         text_type: str = "markdown") -> SynthesisRequest:
    return build_request({"text": text, "text_type": text_type}, registry, settings)


def spoken_words(request: SynthesisRequest) -> list[str]:
    """The words the phonemizer is given (the normalizer's output), lower case."""
    said = " ".join(value for kind, value in request.script if kind == "text")
    return re.findall(r"[a-z0-9']+", said.lower())


def unstressed(phonemes: str) -> str:
    return phonemes.replace("ˈ", "").replace("ˌ", "")


def phonemes_of(request: SynthesisRequest) -> str:
    """Every phoneme the voice will be given, stress marks left out, sentences joined by a space."""
    sentences = Phonemizer("en-us").script(request.script, 400)
    return unstressed(" ".join("".join(s.phonemes) for s in sentences))


def word_phonemes(word: str) -> str:
    return unstressed("".join(Phonemizer("en-us").phonemize(word)[0])).strip(" .")


def unsaid(answer: ChatAnswer, request: SynthesisRequest) -> list[str]:
    """The marks' names and URL path words found in the spoken words or in the phonemes."""
    words, phonemes = spoken_words(request), phonemes_of(request)
    return [word for word in (*NEVER_SAID, *answer.url_words)
            if word in words or f" {word_phonemes(word)} " in f" {phonemes} "]


@pytest.mark.parametrize("answer", ANSWERS, ids=lambda a: a.markdown.split("\n")[0][:30])
def test_no_markdown_syntax_or_url_path_is_said_in_a_chat_answer(
    answer: ChatAnswer, registry: VoiceRegistry, settings: Settings
) -> None:
    # Given a chat model's answer in Markdown
    # When it is read as Markdown (the OpenAI route's default)
    request = read(answer.markdown, registry, settings)
    # Then no mark's name nor any word of a URL's path is in the spoken words or the phonemes
    assert unsaid(answer, request) == []
    # And the words said are the words of the same answer written as plain prose
    assert spoken_words(request) == spoken_words(read(answer.spoken, registry, settings, "text"))


def test_the_same_answers_read_as_plain_text_say_the_syntax(registry: VoiceRegistry,
                                                            settings: Settings) -> None:
    # Given the answers read as plain text (text_type "text": the reading before Markdown)
    # Then the check above finds what it looks for: the syntax and the URL paths are said
    found = {word for answer in ANSWERS for word in unsaid(answer, read(answer.markdown, registry, settings,
                                                                          "text"))}
    assert {"asterisk", "hashtag", "slash", "install", "manual"} <= found


@pytest.mark.parametrize(("markdown", "said"), [
    ("## Setup steps\nRun it now", "Setup steps. Run it now."),
    ("Setup\n=====\n\nDone.", "Setup. Done."),
    ("This is **bold**, *italic*, __strong__, _soft_ and ***both***.",
     "This is bold, italic, strong, soft and both."),
    ("- first item\n- second item:\n  1. nested one", "first item. second item. nested one."),
    ("- [ ] open task\n- [x] done task", "open task. done task."),
    ("Read [the guide](https://example.org/docs/guide) first.", "Read the guide first."),
    ("Run `pip install tts-queue` now.", "Run pip install tts-queue now."),
    ("Before.\n\n```python\nprint('x')\n```\n\nAfter.", "Before. After."),
    ("| Name | Size |\n|---|---:|\n| alpha | 3 |", "Name, Size. alpha, 3."),
    ("Go to https://www.example.com/a/b?c=1#top.", "Go to example.com."),
    ("See <https://docs.example.org/x/y> or (https://en.wikipedia.org/wiki/Foo_(bar)).",
     "See docs.example.org or (en.wikipedia.org)."),
    ("Done 🎉🎉\n\nNext ✅", "Done. Next."),
    ("> **Note:** quoted", "Note: quoted."),
    ("Image ![a chart](https://x.org/chart.png) here.", "Image here."),
    ("# 見出し\n\n本文です", "見出し。 本文です。"),
])
def test_each_construct_is_read_as_a_person_reads_it(markdown: str, said: str, registry: VoiceRegistry,
                                                      settings: Settings) -> None:
    # When Markdown is read (headings and list items are sentences; emphasis, code and a table's
    # rule vanish; a link is its text, a URL its host, a code block and an image are skipped)
    # Then the text said is what a person would say
    assert read(markdown, registry, settings, "markdown").text == said


@pytest.mark.parametrize("text", ["#1 is 5 * 3 in snake_case.", "Use my_var_name and a*b*c here.",
                                  "Costs $5, #hashtag, 2 * 2 = 4."])
def test_what_is_not_markdown_keeps_the_normalizers_reading(text: str, registry: VoiceRegistry,
                                                            settings: Settings) -> None:
    # Given text with a '#' inside a line, '*' between spaces and '_' inside words
    # Then it is said exactly as the plain-text reading says it
    assert read(text, registry, settings).script == read(text, registry, settings, "text").script


def test_ssml_stays_ssml_when_markdown_is_asked(registry: VoiceRegistry, settings: Settings) -> None:
    ssml = '<speak>Hello <break time="300ms"/> **world**</speak>'
    # When SSML is sent with text_type markdown
    request = read(ssml, registry, settings)
    # Then it is read as SSML (its break is kept), as when no type is given
    assert ("break", "300") in request.script
    assert request.script == build_request({"text": ssml}, registry, settings).script


def test_nothing_to_say_once_read_is_its_own_error(registry: VoiceRegistry, settings: Settings) -> None:
    # A code block alone has nothing a person would say; an empty text stays empty_text
    with pytest.raises(NothingToSpeak):
        read("```\ncode only\n```", registry, settings)
    with pytest.raises(EmptyText):
        read("   ", registry, settings)


def test_the_cache_key_follows_what_is_said(registry: VoiceRegistry, settings: Settings) -> None:
    # Given the same words as Markdown and as plain text, and the Markdown read as plain text
    markdown = read("## Hello\n\n**Good** morning", registry, settings)
    plain = read("Hello. Good morning.", registry, settings, "text")
    literal = read("## Hello\n\n**Good** morning", registry, settings, "text")
    # Then the Markdown shares the plain text's key (the same audio), and differs from its literal reading
    assert cache_key(markdown, DIGEST) == cache_key(plain, DIGEST)
    assert cache_key(markdown, DIGEST) != cache_key(literal, DIGEST)


def test_the_audio_estimate_counts_what_is_said(registry: VoiceRegistry, settings: Settings) -> None:
    # Given an answer with a long URL and a code block, as Markdown and as plain text
    answer = ANSWERS[2]
    spec = registry.get("tiny")

    def seconds(request: SynthesisRequest) -> float:
        return estimated_seconds(request.script, spec, 1.0, 200, 400)

    markdown = seconds(read(answer.markdown, registry, settings))
    plain = seconds(read(answer.spoken, registry, settings, "text"))
    literal = seconds(read(answer.markdown, registry, settings, "text"))
    # Then the Markdown's estimate is the plain answer's (within its pauses), well under the literal one's
    assert abs(markdown - plain) < 0.1 * plain
    assert literal > 1.3 * markdown


@pytest.mark.parametrize("family", ["urls", "closing brackets", "www runs", "emphasis and lists"])
def test_reading_markdown_is_linear(family: str) -> None:
    build = {
        "urls": lambda n: "see http://a.b/" + "x/" * n + " and https://" + "c." * n,
        "closing brackets": lambda n: "(" * n + "http://a.b/c" + ")" * n,
        "www runs": lambda n: "www." * n + " " + "<http://" * n,
        "emphasis and lists": lambda n: ("- **a** *b* `c` [d](http://e.f/g)\n" * n),
    }[family]
    # Then read_markdown takes at most about twice as long on twice the input
    assert_linear(build, lambda text: read_markdown(str(text)), 256)
