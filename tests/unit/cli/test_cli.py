"""The ``tts-queue`` command, called in-process with an injected environment."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest
import soundfile

from tts_queue.cli import main


@pytest.mark.integration
def test_say_writes_speech_with_the_default_voice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "hello.flac"
    code = main(["say", "Hello there. The meeting starts at nine.", "-o", str(out)],
                env={"TTS_DATA_DIR": str(tmp_path)})
    assert code == 0
    samples, rate = soundfile.read(out)
    assert rate == 22050 and 1.5 < len(samples) / rate < 5
    assert "2 sentence(s)" in capsys.readouterr().err


def test_voices_lists_the_verified_default_voice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["voices", "--json"], env={"TTS_DATA_DIR": str(tmp_path)}) == 0
    listing = json.loads(capsys.readouterr().out)
    joe = next(v for v in listing["voices"] if v["id"] == "en_US-joe-medium")
    assert joe["status"] == "verified" and joe["language"] == "en_US" and "joe" in joe["aliases"]
    # providers: what was asked, what this onnxruntime has, and the order a session would try
    assert listing["providers"]["requested"] == "auto"
    assert listing["providers"]["order"][-1] == "CPUExecutionProvider"


def test_voices_load_reports_the_provider_read_back_from_the_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a CPU-only machine and the default voice
    # When the voices are loaded and listed
    assert main(["voices", "--load", "--json"], env={"TTS_DATA_DIR": str(tmp_path)}) == 0
    joe = next(v for v in json.loads(capsys.readouterr().out)["voices"] if v["id"] == "en_US-joe-medium")
    # Then the provider is the one the session runs on
    assert joe["provider"] == "CPUExecutionProvider"


def test_a_demanded_provider_that_is_missing_fails_loudly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a CPU-only machine where the deployment demands CUDA
    # When synthesis is asked for
    code = main(["say", "Hello.", "-o", str(tmp_path / "x.wav")],
                env={"TTS_DATA_DIR": str(tmp_path), "TTS_PROVIDERS": "cuda"})
    # Then it fails with a config error naming CUDA instead of running on CPU
    err = capsys.readouterr().err
    assert code == 2 and "[config_error]" in err and "CUDAExecutionProvider" in err
    assert not (tmp_path / "x.wav").exists()


@pytest.mark.parametrize(("argv", "env", "message"), [
    (["say", "   ", "-o", "x.wav"], {}, "empty_text"),
    (["say", "hi", "--voice", "nobody", "-o", "x.wav"], {}, "unknown_voice"),
    (["say", "<speak><audio/></speak>", "-o", "x.wav"], {}, "unsupported_ssml"),
    (["say", "Hello <b>", "--ssml", "-o", "x.wav"], {}, "invalid_ssml"),
    (["worker"], {"TTS_REDIS_URL": "redis://127.0.0.1:6379/15"}, "config_error"),
    (["status", "00000000-0000-0000-0000-000000000000", "--api", "http://127.0.0.1:9"], {},
     "service_unavailable"),
    (["up"], {"TTS_CPU_MAX_BATCH": "0"}, "config_error"),
    (["migrate"], {"TTS_DATABASE_URL": "postgresql+psycopg://tts:pw@127.0.0.1:9/none"}, "migration_failed"),
])
def test_errors_are_one_clear_line_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], env: dict[str, str],
    message: str,
) -> None:
    code = main(argv, env={"TTS_DATA_DIR": str(tmp_path), **env})
    err = capsys.readouterr().err
    assert code == 2 and f"[{message}]" in err and "Traceback" not in err


def test_migrate_says_where_without_the_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a database nobody migrated yet
    url = f"sqlite:///{tmp_path / 'tts.db'}"
    # When it is migrated, then it says which one is up to date
    assert main(["migrate"], env={"TTS_DATA_DIR": str(tmp_path), "TTS_DATABASE_URL": url}) == 0
    assert f"database at {url} is up to date" in capsys.readouterr().err


def test_settings_lists_defaults_and_current_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a deployment with a broker URL that has a password
    env = {"TTS_DATA_DIR": str(tmp_path), "TTS_REDIS_URL": "redis://:pw-in-url@broker:6379/0"}
    # When the defaults, then the values in effect, are listed
    assert main(["settings"], env=env) == 0
    defaults = capsys.readouterr().out
    assert main(["settings", "--current"], env=env) == 0
    current = capsys.readouterr().out
    # Then both list every variable; the current broker URL is there, its password masked
    assert "TTS_REDIS_URL" in defaults and "pw-in-url" not in defaults
    assert "redis://:***@broker:6379/0" in current and "pw-in-url" not in current


# --- tts-queue worker ---------------------------------------------------------------------------


class Exec:
    """Stands in for ``os.execve``: records what would have replaced the process."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.command: list[str] = []
        self.env: dict[str, str] = {}
        monkeypatch.setattr(os, "execve", self)

    def __call__(self, path: str, command: list[str], env: dict[str, str]) -> None:
        assert path == command[0]
        self.command, self.env = command, env


SERVICE_ENV = {"TTS_REDIS_URL": "redis://127.0.0.1:6379/15", "TTS_DATABASE_URL": "sqlite:////tmp/x.db"}


def test_worker_device_pins_one_gpu_before_onnxruntime_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a GPU host
    execve = Exec(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    # When a GPU-pool worker is started on GPU 3
    code = main(["worker", "--pool", "gpu", "--device", "3", "--concurrency", "8"],
                env={"TTS_DATA_DIR": str(tmp_path), **SERVICE_ENV})
    # Then the process it becomes sees GPU 3 alone, as device 0, from its first instruction
    # (the variable is in the environment execve starts Python with, so CUDA reads it first)
    assert code == 0
    assert execve.env["CUDA_VISIBLE_DEVICES"] == "3" and execve.env["TTS_CUDA_DEVICE"] == "0"
    assert execve.env["TTS_WORKER_POOL"] == "gpu" and execve.env["TTS_WORKER_CONCURRENCY"] == "8"
    # And it is a threads-pool celery worker on the GPU queues, named after its GPU
    command = execve.command
    assert command[1:5] == ["-m", "celery", "-A", "workers.app"]
    assert command[command.index("--pool") + 1] == "threads"
    assert command[command.index("--concurrency") + 1] == "8"
    assert command[command.index("--hostname") + 1] == "gpu3@%h"
    assert command[command.index("--queues") + 1].split(",")[0] == "tts.gpu"


def test_worker_without_device_leaves_the_gpus_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    execve = Exec(monkeypatch)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert main(["worker", "--pool", "gpu"], env={"TTS_DATA_DIR": str(tmp_path), **SERVICE_ENV}) == 0
    assert "CUDA_VISIBLE_DEVICES" not in execve.env and "TTS_CUDA_DEVICE" not in execve.env
    assert execve.command[execve.command.index("--hostname") + 1] == "gpu@%h"


@pytest.mark.parametrize("argv", [["worker", "--pool", "cpu", "--device", "0"],
                                  ["worker", "--pool", "gpu", "--device", "-1"]])
def test_worker_device_needs_the_gpu_pool_and_a_gpu_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str],
) -> None:
    execve = Exec(monkeypatch)
    code = main(argv, env={"TTS_DATA_DIR": str(tmp_path), **SERVICE_ENV})
    assert code == 2 and "[config_error]" in capsys.readouterr().err
    assert execve.command == []


def test_wyoming_runs_the_wyoming_server_on_its_port_and_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # When `tts-queue wyoming --port 10300` is run with the API's host set
    execve = Exec(monkeypatch)
    code = main(["wyoming", "--port", "10300"],
                env={"TTS_DATA_DIR": str(tmp_path), "TTS_HOST": "0.0.0.0", **SERVICE_ENV})
    # Then it becomes the Wyoming server's own process, on that port and the API's host
    assert code == 0
    assert execve.command[1:] == ["-m", "wyoming_server"]
    assert (execve.env["TTS_WYOMING_PORT"], execve.env["TTS_WYOMING_HOST"]) == ("10300", "0.0.0.0")


@pytest.mark.parametrize("argv", [["wyoming"], ["up", "--wyoming-port", "10200"]])
def test_with_keys_required_wyoming_refuses_to_start_without_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str],
) -> None:
    # Given keys required and no TTS_WYOMING_KEY
    execve = Exec(monkeypatch)
    # When the Wyoming server is asked for, alone or beside the API
    code = main(argv, env={"TTS_DATA_DIR": str(tmp_path), "TTS_AUTH": "required", **SERVICE_ENV})
    # Then nothing starts, and the error says what to set
    error = capsys.readouterr().err
    assert code == 2 and "[config_error]" in error and "TTS_WYOMING_KEY" in error
    assert execve.command == [] and not (tmp_path / "up.pids").exists()


def test_a_get_on_a_connection_the_server_closed_meanwhile_is_sent_again() -> None:
    from tts_queue.cli.client import Client

    # Given a server that answers a request kept alive, then closes that connection as the next
    # request arrives on it (as gunicorn does when its 2 s keep-alive ends just as a client that
    # waited out a Retry-After sends again), and answers on a new connection
    server = socket.create_server(("127.0.0.1", 0))
    answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    accepted: list[int] = []

    def serve() -> None:
        with server.accept()[0] as first:
            accepted.append(1)
            first.recv(65536)
            first.sendall(answer)
            first.recv(65536)  # the next request: closed unanswered
        with server.accept()[0] as again:
            accepted.append(1)
            again.recv(65536)
            again.sendall(answer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = Client(f"http://127.0.0.1:{server.getsockname()[1]}", timeout=5)
    # When the client asks twice on its kept-alive session
    first = client._call("GET", "/v1/books/x")
    second = client._call("GET", "/v1/books/x")
    thread.join(timeout=5)
    server.close()
    # Then both are answered: the second on a connection opened again
    assert first.json() == second.json() == {} and len(accepted) == 2
