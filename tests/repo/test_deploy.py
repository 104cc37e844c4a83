"""docker-compose.yml cannot be run here (no Docker engine), so check what can go wrong in it:
every role is there, commands name real entry points, and queue names match the code's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tts_queue.broker.names import queue_name, webhook_queue
from tts_queue.cli.launcher import worker_command
from tts_queue.enums import Lane

yaml = pytest.importorskip("yaml")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def test_the_published_api_needs_keys(compose: dict[str, Any]) -> None:
    environment = compose["x-tts"]["environment"]
    assert environment["TTS_AUTH"] == "${TTS_AUTH:-required}"
    assert "0.0.0.0:8000" in compose["services"]["api"]["command"]


def test_every_role_is_defined(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"redis", "api", "worker-cpu", "worker-gpu", "scheduler", "postgres", "migrate"} <= set(services)
    assert services["worker-gpu"]["profiles"] == ["gpu"]
    assert services["postgres"]["profiles"] == ["postgres"]


def test_workers_consume_the_queues_the_api_sends_to(compose: dict[str, Any]) -> None:
    for pool in ("cpu", "gpu"):
        # compose runs `tts-queue worker`, which builds the celery command line below
        assert compose["services"][f"worker-{pool}"]["command"] == ["tts-queue", "worker", "--pool", pool]
        assert compose["services"][f"worker-{pool}"]["environment"]["TTS_WORKER_POOL"] == pool
        command = worker_command(pool, 16, prefix="tts")
        queues = command[command.index("--queues") + 1].split(",")
        assert queues == [queue_name(pool, Lane.INTERACTIVE), queue_name(pool, Lane.MAINTENANCE),
                          webhook_queue(), queue_name(pool, Lane.BULK)]
        # threads pool: CUDA cannot be re-initialized in forked children
        assert command[command.index("--pool") + 1] == "threads"


def test_entry_points_exist(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert "api.wsgi:app" in services["api"]["command"]
    for name in ("worker-cpu", "worker-gpu", "scheduler"):
        assert services[name]["command"][0] == "tts-queue"
    assert worker_command("cpu", 1)[1:5] == ["-m", "celery", "-A", "workers.app"]
    for module in ("api/wsgi.py", "workers/app.py"):
        assert (ROOT / module).is_file()


def test_the_wyoming_server_runs_on_its_port_under_its_own_key(compose: dict[str, Any]) -> None:
    # `tts-queue wyoming` (its own process, in front of the same queue), published on 10200, with
    # the key it serves under passed through (with keys required it refuses to start without one)
    wyoming = compose["services"]["wyoming"]
    assert wyoming["command"] == ["tts-queue", "wyoming", "--port", "10200"]
    assert wyoming["ports"] == ["10200:10200"] and wyoming["profiles"] == ["wyoming"]
    assert wyoming["environment"]["TTS_WYOMING_KEY"] == "${TTS_WYOMING_KEY:-}"
    assert wyoming["environment"]["TTS_AUTH"] == "${TTS_AUTH:-required}"


def test_broker_never_evicts_and_keeps_an_append_only_file(compose: dict[str, Any]) -> None:
    command = compose["services"]["redis"]["command"]
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert command[command.index("--appendonly") + 1] == "yes"


def test_dockerfile_copies_every_package() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in ("tts_queue", "workers", "api", "wyoming_server", "models", "migrations"):
        assert f"COPY {package} ./{package}" in dockerfile


def test_access_logs_never_carry_a_query_string(compose: dict[str, Any]) -> None:
    # A refused ?api_key=... must not land in an access log either: path only, never %(r)s/%(q)s.
    from tts_queue.cli.launcher import ACCESS_LOG

    api_command = " ".join(compose["services"]["api"]["command"])
    for form in (ACCESS_LOG, api_command):
        assert "%(U)s" in form
        assert "%(r)s" not in form and "%(q)s" not in form


def test_the_gpu_image_ends_with_onnxruntime_gpu_in_place_of_the_cpu_build(compose: dict[str, Any]) -> None:
    # Given the GPU worker's build (compose passes the gpu extra)
    assert "gpu" in compose["services"]["worker-gpu"]["build"]["args"]["EXTRAS"].split(",")
    dockerfile = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    [install] = [line for line in dockerfile.splitlines() if line.startswith("RUN pip install")]
    gpu_branch = install[install.index("*,gpu,*)"):]
    # Then the image removes both builds (they install the same module) before installing the
    # documented requirements file, in that order, and checks the CUDA build is what is left
    uninstall = gpu_branch.index("pip uninstall -y onnxruntime onnxruntime-gpu")
    reinstall = gpu_branch.index("pip install --no-cache-dir -r requirements-gpu.txt")
    check = gpu_branch.index("'CUDAExecutionProvider' in p")
    assert uninstall < reinstall < check
    assert "COPY requirements-gpu.txt" in dockerfile
    # And the requirements file names the GPU build alone, with its CUDA and cuDNN wheels
    lines = [line.strip() for line in (ROOT / "requirements-gpu.txt").read_text().splitlines()]
    requirements = [line for line in lines if line and not line.startswith("#")]
    assert requirements == ["onnxruntime-gpu[cuda,cudnn]>=1.21"]
    # And the operations guide gives the same two commands
    guide = (ROOT / "docs" / "operations.md").read_text()
    assert "pip uninstall -y onnxruntime onnxruntime-gpu && pip install -r requirements-gpu.txt" in guide

