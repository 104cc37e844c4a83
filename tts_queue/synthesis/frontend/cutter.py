"""Text that arrives in pieces (a chat model's answer, streamed) cut into sentences as they complete,
so each can be synthesized while the rest is still coming.

``SentenceCutter.feed`` takes the next piece and returns the sentences it completed; ``finish``
returns what is left. A sentence is complete once the first character of the next one has arrived
(only then is it known what follows the stop):

- after ``.``, ``!``, ``?`` or ``…`` (and the closing quotes, brackets or Markdown marks after
  them) and a space, when the sentence has a letter (a list's ``1.`` does not end one), the next
  starts with anything but a lower-case letter, and a ``.`` does not end an abbreviation
  (``Mr.``, ``e.g.``, ``No.``: the normalizer's tables), an initial (``J.``) or a word with a
  period inside (``U.S.``);
- after ``。``, ``！``, ``？`` (and their closing marks), whatever follows;
- at a blank line, or a line break before a Markdown list item, heading or quote.

The cut is cautious: a missed end only makes a longer sentence (its audio starts a little later),
and the request's own frontend still finds every sentence inside it; a false one would break a
sentence's intonation. A sentence longer than ``max_chars`` is cut at its last space (anywhere,
if it has none) so nothing waits without bound: at most ``max_chars`` characters are ever held
back. Each character is looked at once, a decision reads at most ``LOOK_BACK`` characters before
it, and a piece costs one copy of what is held back: linear in the text however it is split.
"""

from __future__ import annotations

from tts_queue.synthesis.frontend.rules import ABBREVIATIONS, BEFORE_NUMBER, MAY_END

STOPS = frozenset(".!?…")
WIDE_STOPS = frozenset("。！？")
CLOSING = frozenset("\"'”’»)]}」』）〕】*_`~")  # quotes, brackets, and Markdown's emphasis and code marks
BLOCK_STARTS = frozenset("-*+#>")
NEVER_ENDS = frozenset({*ABBREVIATIONS, *MAY_END, *BEFORE_NUMBER})
LOOK_BACK = 24  # longer than any abbreviation: the word before a period is read this far at most


class SentenceCutter:
    """Pieces of text in, complete sentences out, in order."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max(2, max_chars)
        self._text = ""  # the sentence being completed (and what follows its end, if any)
        self._start = 0  # where it starts in ``_text`` (cut sentences are dropped once per piece)
        self._scanned = 0  # characters of ``_text`` already looked at
        self._end: int | None = None  # where a possible end was seen, waiting for what follows
        self._wide = False  # that end was a full-width stop (no space needed after it)
        self._breaks = 0  # line breaks since the possible end (two: a blank line)
        self._lettered = False  # the sentence has a letter so far ("1." of a list does not end one)

    @property
    def pending(self) -> int:
        """Characters held back: the sentence not yet complete."""
        return len(self._text) - self._start

    def feed(self, piece: str) -> list[str]:
        """Add ``piece``; the sentences it completed (maybe none)."""
        self._text += piece
        done: list[str] = []
        for index in range(self._scanned, len(self._text)):
            cut = self._look(index)
            if cut is None and index + 1 - self._start > self.max_chars:
                cut = self._long_cut()  # a possible end waiting is dropped: nothing waits past the limit
            if cut is not None:
                done.append(self._text[self._start:cut].strip())
                self._start, self._end, self._breaks = cut, None, 0
                self._lettered = any(ch.isalpha() for ch in self._text[cut:index])  # a long cut's rest
            self._lettered = self._lettered or self._text[index].isalpha()
        # one copy per piece, of the unfinished sentence only: linear however the text is split
        if self._end is not None:
            self._end -= self._start
        self._text, self._scanned, self._start = self._text[self._start:], len(self._text) - self._start, 0
        return [sentence for sentence in done if _speakable(sentence)]

    def finish(self) -> list[str]:
        """What is left once no more text comes (maybe nothing)."""
        rest = self._text[self._start:].strip()
        self._text, self._start, self._scanned, self._end, self._breaks = "", 0, 0, None, 0
        self._lettered = False
        return [rest] if _speakable(rest) else []

    def _look(self, index: int) -> int | None:
        """Look at the character at ``index``: where the sentence before it ends, if it does."""
        char = self._text[index]
        if self._end is not None:
            return self._after_end(index, char)
        if char in WIDE_STOPS:
            self._end, self._wide = index + 1, True
        elif char in STOPS:
            self._end, self._wide = index + 1, False
        elif char == "\n":
            self._end, self._wide, self._breaks = index, False, 1
        return None

    def _after_end(self, index: int, char: str) -> int | None:
        """A character after a possible end: more of the end, the space after it, or the next
        sentence's first character (then whether it really ended)."""
        assert self._end is not None
        stops = WIDE_STOPS if self._wide else STOPS
        if index == self._end and (char in stops or char in CLOSING):
            self._end = index + 1  # "?!", '."', "。」": still the end
            return None
        if char.isspace():
            self._breaks += char == "\n"
            return None
        end, spaced, breaks = self._end, index > self._end, self._breaks
        self._end, self._breaks = None, 0
        if breaks >= 2 or (breaks == 1 and (char in BLOCK_STARTS or char.isdigit())):
            return index  # a blank line, or a line break before a list item or a heading
        if self._wide or (spaced and end > self._start and self._ends_sentence(end, char)):
            return index
        if char in STOPS or char in WIDE_STOPS:  # "Hi.Hi." (no space): a new possible end
            return self._look(index)
        return None

    def _ends_sentence(self, end: int, first: str) -> bool:
        """Whether the stop before ``end`` ends a sentence, the next one starting with ``first``."""
        if first.islower() or not self._lettered:  # "and so", or a list's "1." alone
            return False
        text, stop = self._text, end
        while stop - 1 > self._start and text[stop - 1] in CLOSING:
            stop -= 1
        if text[stop - 1] != ".":
            return text[stop - 1] in STOPS  # "!", "?", "…" (a line break alone never is)
        start = stop - 1
        while start > self._start and stop - start < LOOK_BACK and not text[start - 1].isspace():
            start -= 1
        word = text[start:stop].lstrip("\"'“‘([{")
        letters = word[:-1]
        if word in NEVER_ENDS or "." in letters or (len(letters) == 1 and letters.isalpha()):
            return False
        return any(ch.isalnum() for ch in letters)

    def _long_cut(self) -> int:
        """Where a sentence longer than ``max_chars`` is cut: after its last space, else anywhere."""
        limit = self._start + self.max_chars
        space = self._text.rfind(" ", self._start + 1, limit)
        return space + 1 if space > 0 else limit


def _speakable(sentence: str) -> bool:
    """Whether a piece has anything to say (a letter or a digit)."""
    return any(ch.isalnum() for ch in sentence)
