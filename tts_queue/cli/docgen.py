"""The reference documents generated from the code: ``docs/configuration.md`` from the settings'
declarations, ``docs/errors.md`` from the error tree.

``python -m tts_queue.cli.docgen`` rewrites both (in ``./docs``, or the folder it is given);
``--check`` writes nothing and exits 1 when a file differs from the code. The tests compare each
file with its function here, so a setting or an error changed without its document fails them.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from tts_queue.errors import ERRORS
from tts_queue.settings import SettingInfo, Settings, describe, markdown_table

REGENERATE = "python -m tts_queue.cli.docgen"

CONFIGURATION_INTRO = """\
# Configuration

Every setting is a `TTS_*` environment variable with a documented default. The `tts-queue`
command, the API and the Celery worker app read the environment once, when they start, into one
frozen settings object; nothing deeper reads it, so a change takes effect at the next start
(`tts-queue up` hands its settings on to the processes it starts). An unset or empty variable
keeps its default; a value that cannot be used stops the process with a `config_error`. Booleans
are `true` or `false` (or `1`/`0`, `yes`/`no`, `on`/`off`), lists are comma-separated, and maps
are `name=value,name=value`.

`tts-queue settings` lists every variable with its default, and `tts-queue settings --current`
the values in effect here (secrets masked). A few settings are also flags of the commands that use
them, and a flag overrides its variable (e.g. `tts-queue up --host 0.0.0.0 --port 9000`):
{flags}.
"""

ERRORS_INTRO = """\
# Error codes

Every error the API answers is JSON with a stable code, which clients branch on, and a message for
people, under a 4xx or 5xx status:

```json
{"error": {"code": "unknown_voice", "message": "..."}}
```

A 5xx body also carries the request's `request_id` (every log line of that request names it), and
its message is a fixed sentence per code, never the text of the exception behind it (that goes to
the log). Most 429 and 503 answers say when to try again in a `Retry-After` header. A failed task
or book carries the same `{"code", "message"}` under `error` in its status document; the
OpenAI-compatible route (`POST /v1/audio/speech`) answers in OpenAI's error shape, with the same
code in `error.code` (an unknown voice there is a 400).

One row per code, by status. The status is the one the code's class declares, with two
exceptions: `http_error` stands for any HTTP refusal that has no code of its own, under that
refusal's status; and a request that waited for its task (`POST /tts`) answers a failed task's
code with a 422.
"""


def generated_note(source: str) -> str:
    """The HTML comment that opens a generated document: where it comes from, how to remake it."""
    return (f"<!-- Generated from {source} by `{REGENERATE}`: edit the code, not this file, and "
            "rerun it. A test fails while this file and the code disagree. -->")


def setting_groups() -> list[tuple[str, list[SettingInfo]]]:
    """``(heading, settings)`` of each group in declaration order: the settings outside any group
    under "General", then one per group, headed by its class's summary."""
    infos = describe()
    groups = [("General", [info for info in infos if "." not in info.path])]
    defaults = Settings()
    for f in dataclasses.fields(defaults):
        group = getattr(defaults, f.name)
        if dataclasses.is_dataclass(group):
            members = [info for info in infos if info.path.startswith(f"{f.name}.")]
            groups.append((summary(type(group).__doc__).rstrip("."), members))
    return [(heading, members) for heading, members in groups if members]


def configuration_doc() -> str:
    """``docs/configuration.md``: how settings are read, then every variable, group by group."""
    flags = ", ".join(f"`{info.flag}` (`{info.variable}`)" for info in describe() if info.flag)
    parts = [generated_note("the settings' declarations in tts_queue/settings.py"),
             CONFIGURATION_INTRO.format(flags=flags).rstrip()]
    for heading, members in setting_groups():
        parts += [f"## {heading}", markdown_table(members)]
    return "\n\n".join(parts) + "\n"


def error_rows() -> list[tuple[str, int, str]]:
    """``(code, HTTP status, meaning)`` of every code of the error tree, by status, then code."""
    rows = [(code, cls.http_status, summary(cls.__doc__)) for code, cls in ERRORS.items()]
    return sorted(rows, key=lambda row: (row[1], row[0]))


def errors_doc() -> str:
    """``docs/errors.md``: the shape of an error, then one row per code."""
    lines = ["| code | HTTP status | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{code}` | {status} | {meaning} |" for code, status, meaning in error_rows()]
    parts = [generated_note("the error tree in tts_queue/errors.py"), ERRORS_INTRO.rstrip(), "\n".join(lines)]
    return "\n\n".join(parts) + "\n"


def summary(doc: str | None) -> str:
    """A docstring's first paragraph on one line, as markdown (reST's double backticks single,
    table bars escaped)."""
    first = (doc or "").strip().split("\n\n")[0]
    return " ".join(first.split()).replace("``", "`").replace("|", "\\|")


DOCUMENTS: dict[str, Callable[[], str]] = {"configuration.md": configuration_doc, "errors.md": errors_doc}


def stale(folder: Path) -> list[str]:
    """The generated documents in ``folder`` that differ from what the code makes now."""
    return [name for name, make in DOCUMENTS.items()
            if not (folder / name).is_file() or (folder / name).read_text(encoding="utf-8") != make()]


def main(argv: Sequence[str] | None = None) -> int:
    """Write the generated documents (or, with ``--check``, say which are stale: exit code 1)."""
    parser = argparse.ArgumentParser(prog=REGENERATE, description="write the generated documents")
    parser.add_argument("folder", nargs="?", default="docs", type=Path, help="default: ./docs")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if one is stale")
    args = parser.parse_args(argv)
    names = stale(args.folder)
    if args.check:
        for name in names:
            print(f"{args.folder / name} is stale: run {REGENERATE}", file=sys.stderr)
        return 1 if names else 0
    for name in names:
        (args.folder / name).write_text(DOCUMENTS[name](), encoding="utf-8")
        print(f"wrote {args.folder / name}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
