"""ARCHITECTURE.md names only what exists: every code name it cites in backticks is found in the code."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from tts_queue.settings import describe

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "ARCHITECTURE.md"
PACKAGES = ("tts_queue", "api", "workers", "wyoming_server")
FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"`([^`\n]+)`")
CALL = re.compile(r"([\w.]+)\(.*\)")  # ``name(...)`` cites ``name``
SETTING = re.compile(r"TTS_[A-Z0-9_]+")
NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)*/?")
FILE_SUFFIXES = (".py", ".md", ".json", ".toml", ".yml", ".yaml", ".txt", ".html", ".css", ".js")


@dataclass(frozen=True)
class Cited:
    """One backticked span of the document: its text, what kind of name it is, and its line."""

    text: str
    kind: str  # "setting", "path", "name", or "other" (a route, a command, a value: not checked)
    line: int


def cited(markdown: str) -> list[Cited]:
    """The backticked spans outside fenced blocks, classified (``name(...)`` as ``name``)."""
    text = FENCED.sub(lambda m: "\n" * m.group(0).count("\n"), markdown)  # keep line numbers
    spans: list[Cited] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in SPAN.finditer(line):
            span = match.group(1).strip()
            call = CALL.fullmatch(span)
            span = call.group(1) if call else span
            spans.append(Cited(span, kind_of(span), number))
    return spans


def kind_of(span: str) -> str:
    """``setting`` (``TTS_*``), ``path`` (has a slash or a file suffix), ``name`` (dotted or bare
    identifier), else ``other``: HTTP routes (``/v1/...``), commands, placeholders, values."""
    if SETTING.fullmatch(span):
        return "setting"
    if not span.startswith("/") and PATH.fullmatch(span) and ("/" in span or span.endswith(FILE_SUFFIXES)):
        return "path"
    if NAME.fullmatch(span):
        return "name"
    return "other"


@dataclass
class CodeIndex:
    """What the project's modules define, read with ``ast`` (nothing is imported)."""

    modules: dict[str, ast.Module] = field(default_factory=dict)
    classes: dict[str, list[ast.ClassDef]] = field(default_factory=lambda: defaultdict(list))
    defined: set[str] = field(default_factory=set)  # every class, function, method and assigned name

    def add(self, module: str, tree: ast.Module) -> None:
        """Index one module's definitions."""
        self.modules[module] = tree
        self.defined.update(top_level(tree))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                self.classes[node.name].append(node)
                self.defined.update(own_members(node))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.defined.add(node.name)

    def members(self, cls: ast.ClassDef, seen: frozenset[str] = frozenset()) -> dict[str, ast.AST]:
        """``cls``'s members, with those of its bases that the project defines."""
        found: dict[str, ast.AST] = {}
        for base in cls.bases:
            name = ast.unparse(base).rpartition(".")[2]  # ``Base`` or ``module.Base``
            parents = self.classes.get(name, []) if name not in seen else []
            for parent in parents:
                found.update(self.members(parent, seen | {cls.name}))
        found.update(own_members(cls))
        return found

    def in_classes(self, classes: Iterable[ast.ClassDef], chain: list[str]) -> bool:
        """Whether ``chain`` (``method``, ``Nested.attr``) is found as members of one of ``classes``."""
        if not chain:
            return True
        for cls in classes:
            member = self.members(cls).get(chain[0])
            if member is None:
                continue
            if len(chain) == 1:
                return True
            nested = [member] if isinstance(member, ast.ClassDef) else []
            if self.in_classes(nested or self.classes.get(chain[0], []), chain[1:]):
                return True
        return False

    def in_module(self, module: str, chain: list[str]) -> bool:
        """Whether ``chain`` (``Class``, ``Class.method``, ``function``) is defined in ``module``."""
        if not chain:
            return True
        tree = self.modules[module]
        if chain[0] not in top_level(tree):
            return False
        if len(chain) == 1:
            return True
        local = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == chain[0]]
        return self.in_classes(local or self.classes.get(chain[0], []), chain[1:])

    def modules_named(self, dotted: str) -> list[str]:
        """Modules ``dotted`` may mean: itself, or a module whose name ends with it
        (``synthesis.fairness``, ``books.m4b``)."""
        return [m for m in self.modules if m == dotted or m.endswith("." + dotted)]

    def knows(self, name: str) -> bool:
        """Whether a dotted or bare name is a module, a definition in one, or a class member."""
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            if any(self.in_module(m, parts[cut:]) for m in self.modules_named(".".join(parts[:cut]))):
                return True
        if len(parts) == 1:
            return name in self.defined
        return self.in_classes(self.classes.get(parts[0], []), parts[1:])


def top_level(tree: ast.Module) -> set[str]:
    """Names a module defines or imports at its top level (``if`` blocks included)."""
    names: set[str] = set()
    for node in _flat(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        else:
            names.update(_assigned(node))
    return names


def own_members(cls: ast.ClassDef) -> dict[str, ast.AST]:
    """A class's own methods, nested classes, class attributes and ``self.x`` attributes."""
    found: dict[str, ast.AST] = {}
    for node in _flat(cls.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = node
        else:
            found.update(dict.fromkeys(_assigned(node), node))
    for method in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        for statement in ast.walk(method):
            for target in _targets(statement):
                for sub in ast.walk(target):
                    if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                            and sub.value.id in ("self", "cls")):
                        found.setdefault(sub.attr, statement)
    return found


def _flat(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements of a body, those inside ``if``/``try`` blocks included."""
    for node in body:
        yield node
        if isinstance(node, ast.If):
            yield from _flat(node.body + node.orelse)
        elif isinstance(node, ast.Try):
            yield from _flat(node.body + node.orelse + node.finalbody)


def _targets(node: ast.AST) -> list[ast.expr]:
    """What an assignment statement assigns to (nothing for other nodes)."""
    if isinstance(node, ast.Assign):
        return node.targets
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return [node.target]
    return []


def _assigned(node: ast.stmt) -> set[str]:
    """Names bound by an assignment statement."""
    return {sub.id for target in _targets(node) for sub in ast.walk(target) if isinstance(sub, ast.Name)}


@cache
def code_index() -> CodeIndex:
    """The index of every module of ``tts_queue``, ``api`` and ``workers``."""
    index = CodeIndex()
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            index.add(module, ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return index


@cache
def celery_task_names() -> frozenset[str]:
    """Dotted string constants at the top of a module (Celery task names such as ``tts.synthesize``)."""
    names = set()
    for tree in code_index().modules.values():
        for node in tree.body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str) and NAME.fullmatch(node.value.value)):
                names.add(node.value.value)
    return frozenset(n for n in names if "." in n)


def unknown(spans: Iterable[Cited]) -> list[str]:
    """``line N: kind `text``` for each cited name the code does not have."""
    settings = {info.variable for info in describe()}
    index = code_index()
    missing = []
    for span in spans:
        if span.kind == "setting":
            ok = span.text in settings
        elif span.kind == "path":
            ok = any((base / span.text).exists() for base in (ROOT, ROOT / "tts_queue"))
        elif span.kind == "name":
            ok = index.knows(span.text) or span.text in celery_task_names()
        else:
            continue
        if not ok:
            missing.append(f"line {span.line}: {span.kind} `{span.text}`")
    return missing


def test_every_name_the_architecture_cites_exists() -> None:
    # Given the backticked names of ARCHITECTURE.md
    spans = cited(DOC.read_text(encoding="utf-8"))
    # Then the document really cites code (a parser that found nothing would pass anything)
    kinds = {kind: sum(1 for s in spans if s.kind == kind) for kind in ("setting", "path", "name")}
    assert all(kinds.values()), f"too few names found to check: {kinds}"
    # And each path exists, each name is defined in tts_queue/, api/ or workers/, each setting is declared
    missing = unknown(spans)
    assert not missing, ("ARCHITECTURE.md cites names the code does not have (renamed or removed? "
                         "fix the document):\n  " + "\n  ".join(missing))


def test_the_checker_reports_bogus_names() -> None:
    # Given a text citing real names and bogus ones of every kind, and spans that are no code names
    sample = ("`tasks/ending.py` `tts_queue/tasks/rows.py` `TaskEnds.run` `fairness.queueing.FairShares` "
              "`TaskStatus.QUEUED` `Entry.cost` `BatchEngine.side_by_side` `tts.synthesize` "
              "`TTS_MAX_AUDIO_S` `build_request(...)` `/v1/tts` `tts-queue up`\n"
              "```\n`NotInAFence`\n```\n"
              "`tasks/nowhere.py` `TaskEnds.vanish` `NoSuchThing` `TTS_NO_SUCH_SETTING` `fairness.Gone`\n")
    # When the checker reads it
    found = unknown(cited(sample))
    # Then exactly the bogus names are reported, with their line (a fenced block is not read)
    assert found == ["line 5: path `tasks/nowhere.py`", "line 5: name `TaskEnds.vanish`",
                     "line 5: name `NoSuchThing`", "line 5: setting `TTS_NO_SUCH_SETTING`",
                     "line 5: name `fairness.Gone`"]
