"""``bench/bench_gpu.py`` runs (``--quick``, CPU, the tiny voice) so it cannot rot unnoticed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import tiny_voice_env

ROOT = Path(__file__).resolve().parents[2]


def test_bench_gpu_quick_runs_on_cpu_and_writes_its_curve(tmp_path: Path, voices_dir: Path) -> None:
    # Given the tiny voice as the only voice and a CPU
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env.update(tiny_voice_env(voices_dir), TTS_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT))
    out = tmp_path / "gpu.json"
    # When the benchmark runs in its quick form
    done = subprocess.run([sys.executable, "bench/bench_gpu.py", "--provider", "cpu", "--quick",
                           "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    # Then it succeeds, prints the curve and the suggestion, and writes them
    assert done.returncode == 0, done.stdout + done.stderr
    assert "suggested: TTS_GPU_MAX_BATCH=" in done.stdout and "-> exact" in done.stdout
    report = json.loads(out.read_text())
    assert report["provider"] == "CPUExecutionProvider" and report["voice"] == "tiny"
    for kind in ("equal", "mixed"):
        assert sorted(report["curve"][kind], key=int) == ["1", "2", "4"]
        assert all(row["sentences_per_s"] > 0 for row in report["curve"][kind].values())
    assert report["curve"]["equal"]["4"]["pad"] == 1.0 and report["curve"]["mixed"]["4"]["pad"] > 1.0
    assert report["suggested"]["TTS_GPU_MAX_BATCH"] in (1, 2, 4)
    # And batched equals single with noise off (the tiny voice is exact bit for bit)
    assert report["exactness"] == {"items": 4, "same_lengths": True, "max_abs_diff": 0.0, "exact": True}


def test_bench_gpu_refuses_a_provider_this_machine_lacks(tmp_path: Path, voices_dir: Path) -> None:
    # Given a CPU-only onnxruntime, when CUDA is asked for, it fails rather than measuring a CPU
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("this onnxruntime has CUDA: the benchmark would measure it")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env.update(tiny_voice_env(voices_dir), TTS_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "bench/bench_gpu.py", "--provider", "cuda", "--quick",
                           "--out", str(tmp_path / "gpu.json")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0 and "CUDAExecutionProvider" in done.stderr
    assert not (tmp_path / "gpu.json").exists()
