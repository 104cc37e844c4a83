"""The Kokoro languages espeak-ng reads: American and British English, Spanish, French, Italian,
Brazilian Portuguese and Hindi, as Kokoro's upstream reads them for its v1.0 voices.

espeak-ng (the one piper-tts carries, through ``text.Phonemizer``) reads each text part in the
voice's language, numbers and abbreviations included, and finds its sentences; its IPA is mapped
into Kokoro's symbols (``symbols.espeak_to_kokoro``). English text has been through the project's
English normalizer before (``request.build_request``): the other languages hear their text as
written, and espeak-ng reads their numbers in their own words ("25 años" veinticinco). Text in
another script inside a sentence is what espeak-ng makes of it (it names a Han character, "Chinese
letter", rather than reading it).

``VERSION`` counts this module's rules: it is part of the voice digest, so a change here never
serves old audio.
"""

from __future__ import annotations

from collections.abc import Mapping

from tts_queue.synthesis.kokoro.phonemizer import English, KokoroPhonemizer
from tts_queue.synthesis.kokoro.symbols import espeak_to_kokoro

VERSION = 1
# A Kokoro voice's language (the manifest's ``language``) -> espeak-ng's voice for it.
ESPEAK_VOICES: Mapping[str, str] = {
    "en_US": "en-us", "en_GB": "en", "es": "es", "fr": "fr", "it": "it", "pt_BR": "pt-br", "hi": "hi",
}
_NAMES = {"en_US": "American English", "en_GB": "British English", "es": "Spanish", "fr": "French",
          "it": "Italian", "pt_BR": "Brazilian Portuguese", "hi": "Hindi"}


class EspeakKokoroPhonemizer(KokoroPhonemizer):
    """Text in one of ``ESPEAK_VOICES``' languages to Kokoro sentences, thread-safe."""

    ends = (".", "!", "?", "।", "॥")

    def __init__(self, vocab: Mapping[str, int], language: str, espeak: English) -> None:
        super().__init__(vocab, espeak, lambda run: run)
        self.code = language
        self.language = _NAMES[language]

    def said(self, text: str) -> list[str]:
        """Kokoro symbols of each sentence espeak-ng finds in a text part."""
        return [espeak_to_kokoro(sentence, self.vocab, self.code) for sentence in self.english(text)]
