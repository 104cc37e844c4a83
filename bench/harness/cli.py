"""The runner's command line: ``python -m bench list`` and ``python -m bench run SCENARIO``."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from bench.harness import against, result
from bench.harness.registry import Scenario, catalog, markdown_table
from bench.harness.run import Run
from bench.harness.stack import Stacks
from bench.harness.tree import RESULTS, ROOT


def pairs(items: Sequence[str], what: str) -> dict[str, str]:
    """``NAME=VALUE`` items as a dict."""
    found = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"{what} takes NAME=VALUE, not {item!r}")
        found[name] = value
    return found


def parser() -> argparse.ArgumentParser:
    """The arguments of ``python -m bench``."""
    top = argparse.ArgumentParser(prog="python -m bench", description="List the benchmark scenarios, or run "
                                  "one and write its result (bench/README.md).")
    sub = top.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="the scenarios, their parameters and quick forms")
    listing.add_argument("--markdown", action="store_true", help="the table of bench/README.md")
    run = sub.add_parser("run", help="run one scenario and write its result")
    run.add_argument("scenario")
    run.add_argument("--quick", action="store_true", help="its quick form (a smoke run; written to a "
                     "temporary folder unless --out says where)")
    run.add_argument("--rounds", type=int, help="rounds (with --against: runs on each tree, alternated)")
    run.add_argument("--against", metavar="REV", help="run it on REV's tree too (a git worktree), "
                     "alternated, and report this / REV")
    run.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                     help="one of the scenario's parameters (python -m bench list shows them)")
    run.add_argument("--set", action="append", default=[], metavar="TTS_NAME=VALUE",
                     help="a setting of the service measured")
    run.add_argument("--out", type=Path, help="the result file (default bench/results/<its result>)")
    run.add_argument("--tree", type=Path, default=ROOT, help=argparse.SUPPRESS)  # an A/B side
    return top


def listing(markdown: bool) -> None:
    """Print the scenarios."""
    if markdown:
        print(markdown_table(), end="")
        return
    for found in catalog().values():
        print(f"{found.name:16} {found.subject:9} {found.description}")
        quick = dict(found.quick) or "the module's own"
        print(f"{'':26} parameters {found.parameters()}; quick {quick}")


def run_one(found: Scenario, args: argparse.Namespace) -> dict[str, object]:
    """Run ``found`` here on ``args.tree``; its result."""
    given = pairs(args.param, "--param")
    if args.rounds is not None:
        if "rounds" not in found.parameters():
            raise SystemExit(f"{found.name} has no rounds")
        given["rounds"] = str(args.rounds)
    try:
        arguments = found.arguments(args.quick, given)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    work = Path(tempfile.mkdtemp(prefix=f"tts-bench-{found.name}-"))
    try:
        run = Run(quick=args.quick, work=work, tree=args.tree.resolve(), settings=pairs(args.set, "--set"),
                  stacks=Stacks())
        figures = found.function(run, **arguments)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    parameters = {**arguments, "quick": args.quick, "settings": run.settings}
    return result.result(found, run.tree, parameters, figures)


def side_args(found: Scenario, args: argparse.Namespace) -> list[str]:
    """The arguments each side of an A/B gets: the same, one round each."""
    forwarded = [*(["--quick"] if args.quick else []), *(f"--param={p}" for p in args.param),
                 *(f"--set={s}" for s in args.set)]
    if "rounds" in found.parameters():
        forwarded.append("--rounds=1")
    return forwarded


def main(argv: Sequence[str] | None = None) -> int:
    """List or run."""
    args = parser().parse_args(argv)
    if args.command == "list":
        listing(args.markdown)
        return 0
    found = catalog().get(args.scenario)
    if found is None:
        raise SystemExit(f"no scenario {args.scenario!r}: python -m bench list")
    if found.missing():
        raise SystemExit(f"{found.name} needs {', '.join(found.missing())}: pip install -e '.[bench]'")
    if args.against:
        data = against.compare(found, args.against, args.rounds or 2, side_args(found, args),
                               lambda line: print(line, file=sys.stderr, flush=True))
    else:
        data = run_one(found, args)
    figures = data["figures"]
    assert isinstance(figures, dict)
    default = (Path(tempfile.gettempdir()) / "tts-bench-quick" if args.quick else RESULTS) / found.result
    out = args.out or default
    result.write(out, data)
    print(f"{found.name}: {result.headline_line(figures)}")
    if "ratios" in data:
        print(f"this / {args.against}: {data['ratios']}")
    print(f"wrote {out}")
    return 0
