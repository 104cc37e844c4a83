"""Monitoring without services: the alert rules parse (promtool when installed, else a structural
check), the dashboard is well formed, ``TTS_METRICS=off`` turns ``/metrics`` into a JSON 404 and
counting into nothing, and the state gauges are read at most once per ``STATE_TTL_S``."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from api import create_app
from api.services import Services
from tests.support import ROOT, FakeQueue, migrate
from tts_queue import metrics
from tts_queue.settings import Settings

RULES = ROOT / "deploy/prometheus/alerts.yml"
DASHBOARD = ROOT / "deploy/grafana/dashboards/tts-queue.json"


def test_the_alert_rules_parse() -> None:
    rules = yaml.safe_load(RULES.read_text())
    names = [rule["alert"] for group in rules["groups"] for rule in group["rules"]]
    # the rules an operator needs: no live worker, queue wait, failure ratio, cache disk, recovery
    assert {"TTSNoLiveWorker", "TTSQueueWaitHigh", "TTSFailureRatioHigh", "TTSCacheNearBudget",
            "TTSRecoveryResending"} <= set(names)
    for group in rules["groups"]:
        for rule in group["rules"]:
            assert rule["expr"].strip() and rule["labels"]["severity"] in ("critical", "warning", "info")
            assert rule["annotations"]["summary"]
            assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]
    promtool = shutil.which("promtool")
    if promtool is not None:  # Debian's prometheus package; .ci/run installs it where apt works
        checked = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert f"{len(names)} rules found" in checked.stdout
        # the config names the rules at their path inside the container: only its syntax is checked
        config = subprocess.run([promtool, "check", "config", "--syntax-only",
                                 str(ROOT / "deploy/prometheus/prometheus.yml")],
                                capture_output=True, text=True)
        assert config.returncode == 0, config.stdout + config.stderr


def test_the_dashboard_is_well_formed() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "tts-queue" and dashboard["panels"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["targets"] and all(target["expr"].strip() for target in panel["targets"]), panel["title"]


def test_metrics_off_means_a_json_404_and_no_counting(tmp_path: Path, voices_dir: Path) -> None:
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                  "TTS_METRICS": "off"})
    migrate(settings)
    queue = FakeQueue()
    client = create_app(settings, Services.build(settings, dispatcher=queue, watch=queue)).test_client()
    try:
        before = metrics.CACHE_MISSES._value.get()
        response = client.get("/metrics")
        assert response.status_code == 404 and response.get_json()["error"]["code"] == "not_found"
        metrics.count(metrics.CACHE_MISSES)
        assert metrics.CACHE_MISSES._value.get() == before
    finally:
        metrics.configure(True)


def test_metrics_on_serves_the_text_format(tmp_path: Path, voices_dir: Path) -> None:
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir)})
    migrate(settings)
    queue = FakeQueue()
    client = create_app(settings, Services.build(settings, dispatcher=queue, watch=queue)).test_client()
    client.get("/healthz")
    response = client.get("/metrics")
    assert response.status_code == 200 and response.content_type.startswith("text/plain")
    text = response.get_data(as_text=True)
    assert 'tts_http_requests_total{method="GET",route="/healthz",status="200"}' in text
    assert "tts_tasks_queued" in text and "tts_books" in text


def test_state_is_read_at_most_once_per_interval() -> None:
    reads: list[int] = []
    now = [0.0]

    def read() -> metrics.State:
        reads.append(1)
        return {"tts_cache_entries": [((), float(len(reads)))]}

    collector = metrics.StateCollector(read, clock=lambda: now[0])
    for _ in range(50):  # a scraper hammering /metrics
        list(collector.collect())
    assert len(reads) == 1
    now[0] += metrics.STATE_TTL_S
    values = [m.samples[0].value for m in collector.collect() if m.name == "tts_cache_entries"]
    assert len(reads) == 2 and values == [2.0]


def test_a_failed_state_read_is_counted_not_raised() -> None:
    def read() -> metrics.State:
        raise ConnectionError("redis is down")

    families = {m.name: m for m in metrics.StateCollector(read).collect()}
    assert families["tts_state_read_errors"].samples[0].value == 1


@pytest.mark.parametrize("name", ["tts.js", "tts.css"])
def test_the_page_and_its_files_are_served_with_a_strict_policy(tmp_path: Path, voices_dir: Path,
                                                                 name: str) -> None:
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                  "TTS_AUTH": "required"})
    migrate(settings)
    queue = FakeQueue()
    client = create_app(settings, Services.build(settings, dispatcher=queue, watch=queue)).test_client()
    page = client.get("/")
    assert page.status_code == 200 and "default-src 'self'" in page.headers["Content-Security-Policy"]
    html = page.get_data(as_text=True)
    assert '<section id="key-section" aria-labelledby="key-heading" >' in html  # auth on: key field shown
    assert "{{" not in html and '<label for="text">' in html
    assert client.get(f"/ui/{name}").status_code == 200
    assert client.get("/ui/../api/__init__.py").status_code == 404
    assert client.get("/ui/index.html").status_code == 404


def test_a_worker_on_its_own_host_serves_its_own_metrics() -> None:
    import urllib.request

    from tests.support import free_port

    port = free_port()
    server, thread = metrics.serve(port)
    try:
        metrics.count(metrics.SWEEPS)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
        assert "tts_recovery_sweeps_total" in text and "tts_stage_seconds" in text
    finally:
        server.shutdown()
        thread.join(timeout=5)
