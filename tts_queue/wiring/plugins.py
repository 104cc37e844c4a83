"""Worker plugins: named by ``TTS_WORKER_PLUGINS`` (``module:attribute``, comma-separated), each
wraps the two seams a worker offers, its voice loader and its synthesizer. A plugin's wrappers
subclass or call the real ones with their exact signatures, so mypy checks them against the code
they wrap. The test suite's fault injection (``tests/hooks/faults.py``: a slow model, a poison
text, a slow load) is one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Protocol, cast

from tts_queue.errors import ConfigError
from tts_queue.synthesis.registry import Loader
from tts_queue.synthesis.synthesizer import Synthesizer


class WorkerPlugin(Protocol):
    """What a worker plugin may wrap."""

    def loader(self, load: Loader) -> Loader:
        """The voice loader to use instead of ``load`` (or ``load`` itself)."""

    def synthesizer(self, synthesizer: Synthesizer) -> Synthesizer:
        """The synthesizer to use instead of ``synthesizer`` (or it itself)."""


def load_plugins(names: str) -> list[WorkerPlugin]:
    """The plugins ``names`` (``module:attribute``, comma-separated) name; ``ConfigError`` for one
    that does not import."""
    found = []
    for name in filter(None, (part.strip() for part in names.split(","))):
        module, _, attribute = name.partition(":")
        try:
            found.append(cast(WorkerPlugin, getattr(importlib.import_module(module), attribute or "plugin")))
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"TTS_WORKER_PLUGINS: {name!r} does not import: {exc}") from exc
    return found


def wrapped_loader(plugins: Sequence[WorkerPlugin]) -> Callable[[Loader], Loader]:
    """The registry's loader wrapped by every plugin, in order."""
    def wrap(load: Loader) -> Loader:
        for plugin in plugins:
            load = plugin.loader(load)
        return load

    return wrap


def wrapped_synthesizer(plugins: Sequence[WorkerPlugin], synthesizer: Synthesizer) -> Synthesizer:
    """``synthesizer`` wrapped by every plugin, in order."""
    for plugin in plugins:
        synthesizer = plugin.synthesizer(synthesizer)
    return synthesizer
