"""``python -m bench.harness.fresh MODULE:FUNCTION KWARGS``: the child side of ``Run.fresh``, which
calls a function in a process of its own and prints what it returned as one JSON line."""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any


def call(target: str, arguments: str) -> Any:
    """``MODULE:FUNCTION`` called with the JSON object ``arguments`` as keywords."""
    module, name = target.split(":")
    found: Any = importlib.import_module(module)
    for part in name.split("."):
        found = getattr(found, part)
    return found(**json.loads(arguments))


if __name__ == "__main__":
    print(json.dumps(call(sys.argv[1], sys.argv[2])), flush=True)
