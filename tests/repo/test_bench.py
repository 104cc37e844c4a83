"""The benchmarks cannot rot unnoticed: every registered scenario runs its quick form (those that
need a service share one ``tts-queue up`` per set of settings, ``SharedStacks``) and returns a result
in the one schema; the runner's command line runs one and compares it against another commit;
``bench/README.md``'s table is the registry's; ``bench/results/`` holds only scenarios' results."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.harness import result
from bench.harness.registry import Figures, Scenario, catalog, markdown_table
from bench.harness.run import Run
from bench.harness.stack import SharedStacks
from bench.harness.tree import RESULTS, ROOT

pytestmark = pytest.mark.integration
SCENARIOS = list(catalog())  # by subject: those that share a service run one after another


@pytest.fixture(scope="module")
def stacks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedStacks]:
    """The services the quick forms share, stopped after the module."""
    shared = SharedStacks(tmp_path_factory.mktemp("stacks"))
    yield shared
    shared.close()


def quick(found: Scenario, stacks: SharedStacks, work: Path) -> dict[str, Any]:
    """``found``'s quick form run here; its result."""
    arguments = found.arguments(True, {})
    figures = found.function(Run(quick=True, work=work, stacks=stacks), **arguments)
    return result.result(found, ROOT, {**arguments, "quick": True}, figures)


def check_gpu(figures: Figures) -> None:
    """The batch curve at each size, padding only when mixed, batched output exact."""
    assert figures["provider"] == "CPUExecutionProvider" and figures["voice"] == "tiny"
    for kind in ("equal", "mixed"):
        assert sorted(figures["curve"][kind], key=int) == ["1", "2", "4"]
        assert all(row["sentences_per_s"] > 0 for row in figures["curve"][kind].values())
    assert figures["curve"]["equal"]["4"]["pad"] == 1.0 and figures["curve"]["mixed"]["4"]["pad"] > 1.0
    assert figures["suggested"]["TTS_GPU_MAX_BATCH"] in (1, 2, 4)
    # the tiny voice is exact bit for bit, batched or alone
    assert figures["exactness"] == {"items": 4, "same_lengths": True, "max_abs_diff": 0.0, "exact": True}


def check_overhead(figures: Figures) -> None:
    """Every kind's CPU by process, the model's share and stages, and the SQL by what ran it."""
    for kind in ("hit", "miss", "stream", "poll", "healthz"):
        burst = figures["rounds"][0][kind]
        assert set(burst["cpu_ms"]) >= {"api", "worker", "redis"}
        # a quick form's ten probes (answered in the poller) or ten polls may cost the API less than
        # one 10 ms clock tick in all
        assert burst["cpu_ms"]["api"] > 0 or (kind in ("healthz", "poll") and burst["cpu_ms"]["api"] == 0)
        assert figures["summary"][kind]["beyond_model_net_ms"]["median"] == burst["beyond_model_net_ms"]
    miss = figures["rounds"][0]["miss"]
    assert miss["model_ms"] > 0 and miss["stages_ms"]["inference_ms"] == miss["model_ms"]
    assert "/v1/tasks/<task_id>" in miss["routes"] and miss["redis_commands"]
    assert figures["lone"]["queue_ms_p50"] > 0
    sql = figures["sql_per_request"]
    assert sql["hit"]["api"]["statements"]["BEGIN IMMEDIATE"] >= 1
    assert any("tasks/service.py:submit" in site for site in sql["hit"]["api"]["by_site"])
    assert sql["miss"]["worker"]["statements"]["UPDATE"] >= 1


def no_check(figures: Figures) -> None:
    """The schema and the headline, checked for every scenario, are enough."""


CHECKS = {"gpu": check_gpu, "overhead": check_overhead}


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_scenario_runs_its_quick_form(name: str, stacks: SharedStacks, tmp_path: Path) -> None:
    # Given a registered scenario (one that needs an extra this environment lacks is skipped)
    found = catalog()[name]
    if found.missing():
        pytest.skip(f"{name} needs {', '.join(found.missing())}: pip install -e '.[bench]'")
    # When its quick form runs
    data = quick(found, stacks, tmp_path)
    # Then its result is in the schema, its headline holds finite numbers, and it is JSON
    assert result.problems(data) == [], data
    numbers = [v for v in data["figures"]["headline"].values() if isinstance(v, int | float)]
    assert numbers and all(math.isfinite(v) for v in numbers), data["figures"]["headline"]
    json.dumps(data, default=str)
    CHECKS.get(name, no_check)(data["figures"])


def test_gpu_refuses_a_provider_this_machine_lacks(tmp_path: Path) -> None:
    # Given a CPU-only onnxruntime, when CUDA is asked for, it fails rather than measuring a CPU
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA: the scenario would measure it")
    found = catalog()["gpu"]
    run = Run(quick=True, work=tmp_path)
    with pytest.raises(Exception, match="CUDAExecutionProvider"):
        found.function(run, **found.arguments(True, {"provider": "cuda"}))


def test_the_command_line_runs_a_scenario_and_compares_it_with_another_commit(tmp_path: Path) -> None:
    # Given a checkout with history
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: nothing to compare against")
    out = tmp_path / "backlog.json"
    # When one scenario runs in its quick form against HEAD (a worktree), one run each
    done = subprocess.run([sys.executable, "-m", "bench", "run", "backlog", "--quick", "--against", "HEAD",
                           "--rounds", "1", "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False)
    # Then it wrote one result with both trees' headlines and their ratios, and left no worktree
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(out.read_text())
    assert result.problems(data) == [] and data["parameters"]["quick"] is True
    assert set(data["ratios"]) == set(data["figures"]["headline"]) == set(data["against"]["headline"])
    assert data["against"]["rev"] == "HEAD" and len(data["runs"]["this"]) == len(data["runs"]["against"]) == 1
    listed = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert "tts-bench-against" not in listed.stdout


def test_the_readme_table_is_the_registry() -> None:
    # Given bench/README.md, then its scenario table is what `python -m bench list --markdown` prints
    readme = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    start, end = "<!-- scenarios: python -m bench list --markdown -->\n", "<!-- end of scenarios -->"
    assert readme[readme.index(start) + len(start):readme.index(end)] == markdown_table()


def test_results_are_scenarios_results() -> None:
    # Given bench/results/, then each file is a registered scenario's result file (one each, 40 at most)
    files = sorted(p.name for p in RESULTS.iterdir() if not p.name.startswith("."))
    owned = {found.result for found in catalog().values()}
    assert [name for name in files if name not in owned] == []
    assert len(files) <= 40
    # And each is in the one result schema, named for the scenario that owns the file
    scenarios = {found.result: found.name for found in catalog().values()}
    for name in files:
        data = json.loads((RESULTS / name).read_text(encoding="utf-8"))
        assert result.problems(data) == [], name
        assert data["scenario"] == scenarios[name], name


# A quoted command line: the scenario's name and what follows it on the line (up to the code span's end).
QUOTED_RUN = re.compile(r"python -m bench run ([a-z_]+)([^`\n]*)")


def test_every_quoted_bench_line_names_a_scenario_and_its_parameters() -> None:
    # Given every document that quotes a figure with the command that reproduces it
    documents = [ROOT / "README.md", ROOT / "ARCHITECTURE.md", ROOT / "bench" / "HISTORY.md",
                 *sorted((ROOT / "docs").glob("*.md"))]
    scenarios, quoted, wrong = catalog(), 0, []
    for document in documents:
        for match in QUOTED_RUN.finditer(document.read_text(encoding="utf-8")):
            name, rest = match.groups()
            quoted += 1
            if name not in scenarios:
                wrong.append(f"{document.name}: no scenario {name}")
                continue
            unknown = set(re.findall(r"--param (\w+)=", rest)) - set(scenarios[name].parameters())
            wrong.extend(f"{document.name}: {name} has no parameter {p}" for p in sorted(unknown))
    # Then each names a registered scenario and parameters it has (a renamed one fails here)
    assert quoted >= 10 and wrong == [], wrong


def test_nothing_in_bench_or_tools_edits_the_import_path() -> None:
    # Given every module of bench/ and tools/, then none inserts into sys.path (they run as modules)
    sources = [*(ROOT / "bench").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]
    edits = [str(p.relative_to(ROOT)) for p in sources if "sys.path.insert" in p.read_text(encoding="utf-8")]
    assert edits == []
