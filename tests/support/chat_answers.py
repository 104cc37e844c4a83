"""Answers as a chat model writes them (Markdown: headings, bold, lists, links, inline code, code
blocks, a table, emoji, bare URLs), each with the same answer written by hand as plain prose: the
words a person reading it aloud would say, punctuated as a person would write them. Used by the
Markdown reading's tests and by ``bench/scenarios/voices/chat_markdown.py``.

``url_words`` lists, per answer, words that appear only in a URL's path or query: none may be heard.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChatAnswer:
    """One answer: as written (Markdown), as a person says it, and its URL-only words."""

    markdown: str
    spoken: str
    url_words: tuple[str, ...] = ()


ANSWERS = (
    ChatAnswer(
        "### Quick answer\n\n"
        "**Yes.** You can run it on a laptop. 🚀\n\n"
        "Here is what you need:\n\n"
        "1. **Python** three or newer\n"
        "2. About *two* gigabytes of free memory\n"
        "3. A working microphone\n\n"
        "See the [setup guide](https://docs.example.org/guide/install?ref=chat) for the details.",
        "Quick answer: yes, you can run it on a laptop. Here is what you need: Python three or newer, "
        "about two gigabytes of free memory, a working microphone. See the setup guide for the details.",
        ("install", "ref", "chat"),
    ),
    ChatAnswer(
        "## Why the bread did not rise\n\n"
        "There are **three** common reasons:\n\n"
        "- The yeast was *too old* or stored in a warm place.\n"
        "- The water was **too hot**, which kills the yeast.\n"
        "- The dough did not rest long enough.\n\n"
        "> **Tip:** proof the yeast in warm water first. If it foams, it is alive. ✅",
        "Why the bread did not rise? There are three common reasons: the yeast was too old or stored "
        "in a warm place, the water was too hot, which kills the yeast; the dough did not rest long "
        "enough. Tip: proof the yeast in warm water first; if it foams, it is alive.",
    ),
    ChatAnswer(
        "## Installing the package\n\n"
        "Open a terminal and run `pip install requests` to get it.\n\n"
        "```bash\n"
        "python -m venv .venv\n"
        "source .venv/bin/activate\n"
        "```\n\n"
        "Then check the version with the `version` command. More help lives at "
        "https://pages.example.com/manual/chapter-seven/index.html today.",
        "Installing the package: open a terminal and run pip install requests to get it, then check "
        "the version with the version command. More help lives at pages.example.com today.",
        ("manual", "chapter", "seven", "index", "html"),
    ),
    ChatAnswer(
        "# Weekend plan ☀️\n\n"
        "| Day | Plan |\n"
        "| --- | --- |\n"
        "| Saturday | Visit the market |\n"
        "| Sunday | Walk along the river |\n\n"
        "**Bottom line:** keep Sunday evening *free* for rest.",
        "Weekend plan: day, plan. Saturday: visit the market. Sunday: walk along the river. Bottom "
        "line: keep Sunday evening free for rest.",
    ),
    ChatAnswer(
        "**Short version:** the meeting moved to Thursday.\n\n"
        "### What changed\n\n"
        "* The room is now on the *second* floor\n"
        "* Lunch is **included**\n"
        "* Bring your badge 🎫\n\n"
        "Questions? Write to the team through <https://forms.example.net/contact/team-alpha>.",
        "Short version: the meeting moved to Thursday. What changed? The room is now on the second "
        "floor, lunch is included; bring your badge. Questions? Write to the team through "
        "forms.example.net.",
        ("contact", "alpha"),
    ),
    ChatAnswer(
        "Great question! 😊\n\n"
        "#### The short story\n\n"
        "The moon has **no light of its own**. It reflects the sun, and what we see each night "
        "depends on where it is in its orbit.\n\n"
        "1. A *new* moon sits between us and the sun.\n"
        "2. A **full** moon sits on the far side of the earth.\n\n"
        "___\n\n"
        "_Hope that helps!_",
        "Great question. The short story: the moon has no light of its own. It reflects the sun, and "
        "what we see each night depends on where it is in its orbit. A new moon sits between us and "
        "the sun; a full moon sits on the far side of the earth. Hope that helps.",
    ),
)
