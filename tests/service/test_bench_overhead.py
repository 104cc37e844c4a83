"""``bench/bench_overhead.py`` runs (``--quick``: one service, the tiny voice) so it cannot rot unnoticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_bench_overhead_quick_measures_every_kind_and_keeps_other_labels(tmp_path: Path) -> None:
    # Given a results file that already holds another label
    out = tmp_path / "overhead.json"
    out.write_text(json.dumps({"labels": {"before": {"kept": True}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env["PYTHONPATH"] = str(ROOT)
    # When the benchmark runs in its quick form (it writes its own tiny voice)
    done = subprocess.run([sys.executable, "bench/bench_overhead.py", "--quick", "--label", "smoke",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    # Then it succeeds and prints the figures the goals name
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CPU beyond the model" in done.stdout and "lone queue_ms" in done.stdout
    report = json.loads(out.read_text())["labels"]
    assert report["before"] == {"kept": True}
    smoke = report["smoke"]
    # And every kind has CPU per request of each process, the model's share and the stages
    for kind in ("hit", "miss", "stream", "poll", "healthz"):
        figures = smoke["rounds"][0][kind]
        assert set(figures["cpu_ms"]) >= {"api", "worker", "redis"}
        assert figures["cpu_ms"]["api"] > 0 and figures["latency_p50_ms"] > 0
        summary = smoke["summary"][kind]
        assert summary["beyond_model_net_ms"]["median"] == figures["beyond_model_net_ms"]
    miss = smoke["rounds"][0]["miss"]
    assert miss["model_ms"] > 0 and miss["stages_ms"]["inference_ms"] == miss["model_ms"]
    assert "/v1/tasks/<task_id>" in miss["routes"] and miss["redis_commands"]
    assert smoke["lone"]["queue_ms_p50"] > 0 and smoke["headline"]["healthz_floor_ms"] is not None
    # And the SQL of each kind was counted in the service's own processes, by what ran it
    sql = smoke["sql_per_request"]
    assert sql["hit"]["api"]["statements"]["BEGIN IMMEDIATE"] >= 1
    assert any("tasks/service.py:submit" in site for site in sql["hit"]["api"]["by_site"])
    assert sql["miss"]["worker"]["statements"]["UPDATE"] >= 1
