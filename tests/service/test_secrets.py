"""Nothing secret leaves: a password in a database, broker or storage URL, and the text of an
exception (hosts, users, socket paths, URLs), never reach what the CLI prints, an HTTP body or a
task's stored error; the stable codes stay, and the details go to the log with passwords masked."""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy.engine import make_url

from api import create_app
from api.services import Services
from tests.support import ROOT, FakeQueue, free_port, migrate
from tts_queue.cli import main
from tts_queue.errors import PUBLIC_MESSAGES, ModelLoadError, SynthesisError
from tts_queue.settings import Settings
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.request import SynthesisRequest
from tts_queue.synthesis.synthesizer import SynthesisResult, Synthesizer
from tts_queue.tasks.executor import TaskExecutor

pytestmark = pytest.mark.integration


def with_password(url: str, password: str) -> tuple[str, str]:
    """``url`` with a password, and the password it carries (the one it already has, if any:
    a server that checks passwords must still accept it; a trusting one accepts any)."""
    parsed = make_url(url)
    secret = parsed.password or password
    return parsed.set(password=secret).render_as_string(hide_password=False), str(secret)


def run_cli(*argv: str, env: dict[str, str]) -> tuple[int, str]:
    """``tts-queue ARGV`` as compose runs it (its own process); exit code and everything printed."""
    done = subprocess.run([sys.executable, "-m", "tts_queue.cli", *argv], env={"PATH": "/usr/bin:/bin",
                          "PYTHONPATH": str(ROOT), **env}, cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout + done.stderr


# --- the CLI -------------------------------------------------------------------------------------


@pytest.mark.parametrize("verbose", [[], ["-v"]], ids=["quiet", "verbose"])
def test_migrate_never_prints_the_database_password(
    fresh_postgres_url: str, tmp_path: Path, verbose: list[str]
) -> None:
    # Given a PostgreSQL URL with a password (compose runs `migrate`: its output is container logs)
    url, secret = with_password(fresh_postgres_url, "s3cret-migrate-pw")
    # When the database is migrated, quietly or with debug logging
    code, output = run_cli(*verbose, "migrate", env={"TTS_DATA_DIR": str(tmp_path), "TTS_DATABASE_URL": url})
    # Then it says where, without the password
    assert code == 0, output
    assert "is up to date" in output and ":***@127.0.0.1" in output
    assert secret not in output


@pytest.mark.parametrize("verbose", [[], ["-v"]], ids=["quiet", "verbose"])
def test_a_failed_migration_is_one_line_without_the_password(tmp_path: Path, verbose: list[str]) -> None:
    # Given a database URL with a password where no server listens
    secret = "s3cret-unreachable-pw"
    url = f"postgresql+psycopg://tts:{secret}@127.0.0.1:{free_port()}/tts"
    # When it is migrated
    code, output = run_cli(*verbose, "migrate", env={"TTS_DATA_DIR": str(tmp_path), "TTS_DATABASE_URL": url})
    # Then the failure has a stable code and says where, and the password is nowhere
    assert code == 2 and "error [migration_failed]" in output and "tts:***@127.0.0.1" in output
    assert secret not in output
    assert ("Traceback" in output) == bool(verbose)


def test_current_settings_mask_every_password(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a deployment whose URLs carry passwords and a token
    secrets = {"TTS_REDIS_URL": ("redis://:r3dis-pw@10.0.0.5:6379/0", "r3dis-pw"),
               "TTS_DATABASE_URL": ("postgresql+psycopg://tts:db-pw-123@db.internal/tts", "db-pw-123"),
               "TTS_STORAGE_URL": ("s3://AKIDEXAMPLE:st0rage-pw@audio-bucket/tts", "st0rage-pw"),
               "TTS_API_URL": ("http://api.internal:8000/?token=t0ken-abc", "t0ken-abc")}
    env = {"TTS_DATA_DIR": str(tmp_path), **{name: url for name, (url, _) in secrets.items()}}
    # When the values in effect are listed
    assert main(["settings", "--current"], env=env) == 0
    output = capsys.readouterr()
    printed = output.out + output.err
    # Then each variable is there, masked, and no secret is
    lines = {line.split()[0]: line for line in output.out.splitlines() if line.startswith("TTS_")}
    assert "redis://:***@10.0.0.5:6379/0" in lines["TTS_REDIS_URL"]
    assert "postgresql+psycopg://tts:***@db.internal/tts" in lines["TTS_DATABASE_URL"]
    assert "s3://AKIDEXAMPLE:***@audio-bucket/tts" in lines["TTS_STORAGE_URL"]
    assert "?token=***" in lines["TTS_API_URL"]
    assert not [secret for _, secret in secrets.values() if secret in printed]


# --- readiness and 5xx bodies --------------------------------------------------------------------


def test_readiness_and_outages_name_no_host_and_no_password(
    tmp_path: Path, voices_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an API whose broker and database URLs have passwords and point where nothing listens
    broker_port, db_port = free_port(), free_port()
    settings = Settings.from_env({
        "TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
        "TTS_REDIS_URL": f"redis://:br0ker-pw@127.0.0.1:{broker_port}/0",
        "TTS_DATABASE_URL": f"postgresql+psycopg://tts:datab4se-pw@127.0.0.1:{db_port}/tts"})
    client = create_app(settings).test_client()
    caplog.set_level(logging.DEBUG)
    # When readiness is asked, and a client submits
    ready = client.get("/readyz")
    submitted = client.post("/v1/tts", json={"text": "Anyone home?"})
    # Then both are 503s with their stable codes and fixed messages
    body = ready.get_json()
    assert ready.status_code == 503 and body["error"]["code"] == "not_ready"
    assert body["error"]["message"] == PUBLIC_MESSAGES["not_ready"]
    assert body["checks"]["database"] == body["checks"]["broker"] == "error: unreachable"
    assert body["checks"]["workers"].startswith("error") and body["checks"]["storage"] == "ok"
    assert submitted.status_code == 503
    assert submitted.get_json()["error"] == {"code": "service_unavailable",
                                             "message": PUBLIC_MESSAGES["service_unavailable"],
                                             "request_id": submitted.headers["X-Request-ID"]}
    # And neither body names a host, a port, a user or a password: no exception text at all
    for text in (ready.get_data(as_text=True), submitted.get_data(as_text=True)):
        for leak in ("br0ker-pw", "datab4se-pw", "127.0.0.1", str(broker_port), str(db_port), "tts:",
                     "Connection refused", "Error "):
            assert leak not in text, (leak, text)
    # And the log has the details, passwords masked
    assert "Connection refused" in caplog.text and str(broker_port) in caplog.text
    assert "br0ker-pw" not in caplog.text and "datab4se-pw" not in caplog.text
    # And the 5xx's request id finds its log line
    assert f"[request {submitted.headers['X-Request-ID']}]" in caplog.text


def test_a_missing_bucket_is_not_ready_without_naming_its_endpoint(
    tmp_path: Path, voices_dir: Path, s3_endpoint: str
) -> None:
    # Given an API whose bucket does not exist on the S3 server
    settings = migrate(Settings.from_env({
        "TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
        "TTS_STORAGE_URL": f"s3://missing-{uuid.uuid4().hex[:8]}/tts"}))
    queue = FakeQueue()
    client = create_app(settings, Services.build(settings, dispatcher=queue, watch=queue)).test_client()
    # When readiness is asked
    answer = client.get("/readyz")
    # Then the storage check says what is wrong, not where the endpoint is
    assert answer.status_code == 503
    assert answer.get_json()["checks"]["storage"].startswith("error: the bucket does not exist")
    assert s3_endpoint.removeprefix("http://") not in answer.get_data(as_text=True)


# --- a task's error ------------------------------------------------------------------------------


class Raising(Synthesizer):
    """A synthesizer whose model fails with ``error``."""

    def __init__(self, synthesizer: Synthesizer, error: Exception) -> None:
        super().__init__(synthesizer.registry, synthesizer.engine)
        self.error = error

    def synthesize(self, request: SynthesisRequest, priority: int = 0,
                   on_audio: Callable[[np.ndarray[Any, Any], int], None] | None = None,
                   owner: str = "") -> SynthesisResult:
        raise self.error


class InlineWorker(FakeQueue):
    """Runs each dispatched task at once, as a worker whose retries ran out would."""

    executor: TaskExecutor

    def dispatch(self, task_id: str, queue: str, stream: bool = False) -> None:
        super().dispatch(task_id, queue, stream)
        try:
            self.executor.execute(task_id)
        except Exception as exc:  # noqa: BLE001 - what workers/tasks.py does after the last retry
            self.executor.fail_unexpected(task_id, exc)


SECRET_TEXT = "connect to postgresql://tts:t0p-s3cret@10.1.2.3:5432/tts failed (socket /run/secret.sock)"


@pytest.mark.parametrize(("error", "code"), [
    (RuntimeError(SECRET_TEXT), "internal_error"),
    (SynthesisError(f"the model failed on a batch of 1: {SECRET_TEXT}"), "synthesis_failed"),
    (ModelLoadError(f"cannot read ONNX model x.onnx: {SECRET_TEXT}"), "model_load_failed"),
], ids=["unexpected", "synthesis", "model-load"])
def test_a_failed_task_stores_and_answers_its_codes_sentence(
    tmp_path: Path, voices_dir: Path, caplog: pytest.LogCaptureFixture, error: Exception, code: str
) -> None:
    # Given a worker whose model fails with an error that quotes a URL, a host and a socket path
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                          "TTS_DEFAULT_VOICE": "tiny"}))
    worker = InlineWorker()
    services = Services.build(settings, dispatcher=worker, watch=worker)
    engine = BatchEngine(services.registry, settings.pool("cpu"))  # never started: nothing reaches it
    worker.executor = TaskExecutor(services.cache, Raising(Synthesizer(services.registry, engine), error),
                                   services.ends, "inline@test", None, None)
    client = create_app(settings, services).test_client()
    caplog.set_level(logging.INFO)
    # When a client waits for synthesis, then reads the task
    answer = client.post("/tts?wait=5", json={"text": "Tell me the password."})
    [(task_id, _)] = worker.sent
    task = client.get(f"/v1/tasks/{task_id}")
    # Then the synchronous answer is the 422 with the task's stable code and its fixed sentence
    assert answer.status_code == 422
    assert answer.get_json()["error"] == {"code": code, "message": PUBLIC_MESSAGES[code]}
    # And so is the task's error
    assert task.get_json()["status"] == "failed"
    assert task.get_json()["error"] == {"code": code, "message": PUBLIC_MESSAGES[code]}
    with services.db.read() as session:
        from tts_queue.tables import TaskRow

        row = session.get(TaskRow, task_id)
        assert row is not None and row.error_message == PUBLIC_MESSAGES[code]
    # And nothing of the exception reached a client or the row
    for text in (answer.get_data(as_text=True), task.get_data(as_text=True)):
        for leak in ("t0p-s3cret", "10.1.2.3", "/run/secret.sock", "postgresql://"):
            assert leak not in text
    # While the worker's log has the details, with the password masked
    assert "10.1.2.3" in caplog.text and "/run/secret.sock" in caplog.text
    assert "t0p-s3cret" not in caplog.text
