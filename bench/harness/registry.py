"""The scenarios, by name: each a function registered with ``@scenario`` (its subject, a one-line
description, the result file it writes and its quick form).

A scenario function takes the run's context (``bench.harness.run.Run``) and keyword parameters with
defaults (what ``--param NAME=VALUE`` sets; ``rounds`` is what ``--rounds`` sets), and returns its
figures: a dict whose ``headline`` holds the numbers an A/B compares."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

Figures = dict[str, Any]
ScenarioFunction = Callable[..., Figures]
# The subjects, in the order the table lists them.
SUBJECTS = ("engine", "voices", "service", "fairness", "books", "storage")


@dataclass(frozen=True)
class Scenario:
    """One registered scenario."""

    name: str
    subject: str
    description: str
    result: str  # its file in bench/results/
    function: ScenarioFunction
    quick: Mapping[str, Any] = field(default_factory=dict)  # the parameters of its quick form
    takes: str = ""  # how long its full form takes on 2 cores
    needs: tuple[str, ...] = ()  # modules it imports that only an extra installs

    def parameters(self) -> dict[str, Any]:
        """Its parameters and their defaults (the function's keyword arguments after ``run``)."""
        found = list(inspect.signature(self.function).parameters.values())[1:]
        return {p.name: p.default for p in found}

    def arguments(self, quick: bool, given: Mapping[str, str]) -> dict[str, Any]:
        """The parameters of a run: the defaults, then the quick form's, then ``given`` (strings
        from the command line, read as the default's type)."""
        defaults = self.parameters()
        unknown = set(given) - set(defaults)
        if unknown:
            raise ValueError(f"{self.name} has no parameter {', '.join(sorted(unknown))}; "
                             f"it has {', '.join(defaults) or 'none'}")
        chosen = {**defaults, **(self.quick if quick else {})}
        for name, value in given.items():
            try:
                chosen[name] = parse(value, defaults[name])
            except ValueError as error:
                raise ValueError(f"{self.name}: {name}={value!r}: {error}") from None
        return chosen

    def missing(self) -> list[str]:
        """The modules of ``needs`` this environment lacks."""
        return [name for name in self.needs if importlib.util.find_spec(name) is None]


def parse(value: str, default: Any) -> Any:
    """``value`` read as ``default``'s type (a bool from true/false/1/0/yes/no)."""
    if isinstance(default, bool):
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(f"{value!r} is not a yes or no")
        return value.lower() in ("true", "1", "yes")
    if isinstance(default, int):
        return int(value)
    if isinstance(default, float):
        return float(value)
    return value


REGISTRY: dict[str, Scenario] = {}


def register(found: Scenario) -> Scenario:
    """Add ``found`` to the registry (a name is registered once; a quick form names parameters it has)."""
    if found.name in REGISTRY:
        raise ValueError(f"scenario {found.name!r} is registered twice")
    if found.subject not in SUBJECTS:
        raise ValueError(f"{found.name}: subject {found.subject!r} is not one of {SUBJECTS}")
    if "\n" in found.description or not found.description:
        raise ValueError(f"{found.name}: the description is one line")
    unknown = set(found.quick) - set(found.parameters())
    if unknown:
        raise ValueError(f"{found.name}: its quick form sets {sorted(unknown)}, not parameters")
    REGISTRY[found.name] = found
    return found


def scenario(name: str, *, subject: str, description: str, quick: Mapping[str, Any],
             result: str | None = None, takes: str = "", needs: tuple[str, ...] = ()
             ) -> Callable[[ScenarioFunction], ScenarioFunction]:
    """Register the decorated function as the scenario ``name`` (result ``<name>.json`` unless named)."""
    def decorate(function: ScenarioFunction) -> ScenarioFunction:
        register(Scenario(name, subject, description, result or f"{name}.json", function, dict(quick),
                          takes, needs))
        return function

    return decorate


def catalog() -> dict[str, Scenario]:
    """Every scenario, by subject (``SUBJECTS``' order) then name."""
    importlib.import_module("bench.scenarios")
    return dict(sorted(REGISTRY.items(), key=lambda kv: (SUBJECTS.index(kv[1].subject), kv[0])))


def markdown_table() -> str:
    """The scenario table of ``bench/README.md``."""
    rows = ["| scenario | subject | what it measures | full form takes | result (`bench/results/`) |",
            "| --- | --- | --- | --- | --- |"]
    for found in catalog().values():
        extra = f" (needs {', '.join(found.needs)})" if found.needs else ""
        rows.append(f"| `{found.name}` | {found.subject} | {found.description}{extra} | {found.takes or '-'} "
                    f"| `{found.result}` |")
    return "\n".join(rows) + "\n"
