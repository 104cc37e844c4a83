"""Metrics, stage timings, lists and the web page on the real parts: gunicorn serving the API as
``tts-queue up`` does, a real worker process (tiny voice), Redis and SQLite, the two processes
sharing one ``PROMETHEUS_MULTIPROC_DIR`` as ``tts-queue up`` makes them.

- ``/metrics``: counters move by exactly what was done, histograms have observations, and figures
  only the API makes and figures only a worker makes are both there;
- every metric the alert rules and the dashboard name is exported (``deploy/``);
- ``GET /v1/tasks/<id>`` has ``timings``; ``GET /v1/tasks`` and ``/v1/books`` list newest first;
- headless Chromium loads ``/``, submits a sentence and the page's player holds playable audio;
  a rendered book's reader view highlights the sentence being heard and follows playback, and the
  CLI fetches its read-along EPUB, which EPUBCheck passes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support import ROOT, epubcheck, served, wait_until
from tts_queue.access.keys import ApiKeys
from tts_queue.db import Database

pytestmark = pytest.mark.integration
ARTIFACTS = ROOT / "test-artifacts"
BOOK_DEADLINE_MS = 300_000  # a generous deadline for a book to render on a loaded machine, not a wait
CHROMIUM = next((path for path in map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))
                 if path), None)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
            voices_dir: Path) -> Iterator[dict[str, Any]]:
    data_dir = tmp_path_factory.mktemp("observe")
    shared = data_dir / "metrics"
    shared.mkdir()
    multiproc = {"PROMETHEUS_MULTIPROC_DIR": str(shared)}
    with served(data_dir, redis_url, voices_dir, gunicorn=True, worker_env=multiproc,
                api_env=multiproc) as stack:
        # the same service behind a second API process that requires keys (the page with auth on)
        key = ApiKeys(Database(stack.settings.database_url)).create("pager")[1]
        keyed_url = stack.api("api-keyed.log", TTS_AUTH="required")
        yield {"url": stack.url, "data_dir": data_dir, "keyed_url": keyed_url, "key": key}


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of ``/metrics``: (name, labels) -> value."""
    response = requests.get(f"{url}/metrics", timeout=10)
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def total(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(value for (sample, have), value in samples.items() if sample == name and wanted <= have)


def finish(url: str, task: dict[str, Any]) -> dict[str, Any]:
    while task["status"] in ("queued", "running"):
        task = requests.get(f"{url}/v1/tasks/{task['task_id']}?wait=10", timeout=20).json()
    return task


def submit(url: str, text: str) -> requests.Response:
    return requests.post(f"{url}/v1/tts", json={"text": text, "format": "wav"}, timeout=20)


def test_metrics_move_by_exactly_what_was_done_in_api_and_worker(service: dict[str, Any]) -> None:
    url = service["url"]
    # Given the figures before
    before = scrape(url)
    # When three new texts are synthesized, one of them is asked for again (a hit at submission)
    # and an empty text is refused (400)
    tag = uuid.uuid4().hex[:8]
    texts = [f"Metrics sentence {n} of run {tag}." for n in range(3)]
    accepted = [submit(url, text) for text in texts]
    assert [r.status_code for r in accepted] == [202, 202, 202]
    done = [finish(url, r.json()) for r in accepted]
    assert [t["status"] for t in done] == ["done"] * 3
    repeat = submit(url, texts[0])
    assert repeat.status_code == 200 and repeat.json()["cache_hit"] is True
    assert submit(url, "").status_code == 400
    def settled() -> bool:  # the state gauges are read at most every 5 s
        now = scrape(url)
        return total(now, "tts_cache_entries") >= 3 and total(now, "tts_tasks_finished_total") >= 4
    wait_until(settled, timeout=15, interval=0.5)
    after = scrape(url)

    def moved(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    # Then the API's counters moved by exactly that
    interactive = {"pool": "cpu", "lane": "interactive"}
    assert moved("tts_tasks_submitted_total", **interactive) == 4
    assert moved("tts_cache_misses_total") == 3
    assert moved("tts_cache_hits_total", where="submit") == 1
    assert moved("tts_http_requests_total", route="/v1/tts", method="POST", status="202") == 3
    assert moved("tts_http_requests_total", route="/v1/tts", method="POST", status="200") == 1
    assert moved("tts_http_requests_total", route="/v1/tts", method="POST", status="400") == 1
    # And the worker's: three finished there (plus the hit), nothing failed, three sentences
    assert moved("tts_tasks_finished_total", **interactive) == 4
    assert moved("tts_tasks_failed_total") == 0
    assert moved("tts_sentences_synthesized_total") == 3
    assert moved("tts_audio_seconds_total") == pytest.approx(sum(t["duration_s"] for t in done), abs=0.01)
    # And histograms have observations of each stage the worker timed, and of the batches
    for stage in ("queue", "text", "inference", "encode", "store", "total"):
        assert moved("tts_stage_seconds_count", stage=stage) == 3, stage
    assert moved("tts_batch_size_count") >= 1 and moved("tts_batch_padded_fraction_count") >= 1
    assert moved("tts_http_request_duration_seconds_count", route="/v1/tts") == 5
    # And the state gauges read the shared state: a live cpu worker, nothing queued
    assert total(after, "tts_live_workers", pool="cpu") >= 1
    assert total(after, "tts_cache_entries") >= 3 and total(after, "tts_cache_bytes") > 0
    assert ("tts_state_read_errors", frozenset()) in after and total(after, "tts_state_read_errors") == 0


def test_a_task_says_where_its_time_went(service: dict[str, Any]) -> None:
    url = service["url"]
    task = finish(url, submit(url, f"Timings for {uuid.uuid4().hex[:8]}.").json())
    timings = task["timings"]
    assert set(timings) == {"queue_ms", "text_ms", "inference_ms", "encode_ms", "store_ms", "total_ms"}
    assert all(value is not None and value >= 0 for value in timings.values()), timings
    assert timings["total_ms"] >= timings["queue_ms"] + timings["inference_ms"] - 1
    # A hit at submission ran no stage: no timings, and the same keys in the contract
    hit = finish(url, submit(url, f"Timings for {task['task_id']}.").json())
    again = submit(url, f"Timings for {task['task_id']}.").json()
    assert again["cache_hit"] is True and again["timings"] is None and hit["timings"] is not None


def test_the_api_and_the_worker_freeze_their_start_up_heap(service: dict[str, Any]) -> None:
    # Given the running API and worker processes: each says, once ready, how many start-up objects
    # it moved out of the garbage collector's walks (tts_queue.heap), and there are many
    for log in ("api.log", "worker.log"):
        text = (service["data_dir"] / log).read_text(errors="replace")
        found = re.findall(r"(\d+) start-up objects frozen", text)
        assert found, f"{log} does not say its start-up heap was frozen"
        # (a process that froze nothing would say 0; the imports alone are about 100,000 objects)
        assert int(found[0]) > 50_000, (log, found)


def test_lists_show_the_callers_newest_first_and_refuse_bad_limits(service: dict[str, Any]) -> None:
    url = service["url"]
    ids = [submit(url, f"Listed {n} {uuid.uuid4().hex[:6]}.").json()["task_id"] for n in range(3)]
    listed = requests.get(f"{url}/v1/tasks?limit=2", timeout=10)
    assert listed.status_code == 200
    assert [t["task_id"] for t in listed.json()["tasks"]] == ids[::-1][:2]
    for bad in ("0", "101", "x", "-1", "1e3", "²", "٣"):  # digits, but not ASCII ones
        response = requests.get(f"{url}/v1/tasks?limit={bad}", timeout=10)
        assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_request", bad
    book = requests.post(f"{url}/v1/books", json={"text": "Chapter one. It begins here.", "title": "Listed"},
                         timeout=10)
    assert book.status_code == 202
    books = requests.get(f"{url}/v1/books?limit=1", timeout=10).json()["books"]
    assert [b["book_id"] for b in books] == [book.json()["book_id"]] and books[0]["title"]
    # a list's cost does not grow with its books' chapters: the book's own URL has them
    assert "chapters" not in books[0] and books[0]["chapters_done"] == 0


def test_the_alert_rules_and_the_dashboard_name_only_exported_metrics(service: dict[str, Any]) -> None:
    url = service["url"]
    finish(url, submit(url, f"Dashboard {uuid.uuid4().hex[:8]}.").json())
    exported = {name for name, _ in scrape(url)}
    # counters and histograms that have not moved yet still have their families' names in the text
    text = requests.get(f"{url}/metrics", timeout=10).text
    exported |= {name for name, _ in re.findall(r"^# TYPE (\S+) (\w+)", text, re.MULTILINE)}
    named = referenced_metrics()
    assert named, "no metric found in deploy/"
    missing = sorted(name for name in named if not exported_as(name, exported))
    assert missing == [], f"deploy/ names metrics /metrics does not export: {missing}"


def referenced_metrics() -> set[str]:
    """Every ``tts_*`` metric named by the alert rules and the dashboard."""
    import yaml

    rules = yaml.safe_load((ROOT / "deploy/prometheus/alerts.yml").read_text())
    expressions = [rule["expr"] for group in rules["groups"] for rule in group["rules"]]
    dashboard = json.loads((ROOT / "deploy/grafana/dashboards/tts-queue.json").read_text())
    expressions += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    return {name for expr in expressions for name in re.findall(r"\btts_[a-z_]+", expr)}


def exported_as(name: str, exported: set[str]) -> bool:
    """``name`` as PromQL uses it (``_bucket``, ``_count``, ``_sum``, ``_total`` of a family) is exported."""
    if name in exported:
        return True
    for suffix in ("_bucket", "_count", "_sum", "_total"):
        if name.endswith(suffix) and name[: -len(suffix)] in exported:
            return True
    return False


def launch(playwright: Any) -> Any:
    assert CHROMIUM is not None
    return playwright.chromium.launch(
        executable_path=CHROMIUM, args=["--autoplay-policy=no-user-gesture-required", "--no-sandbox"])


def speak(page: Any, text: str) -> None:
    """Type ``text``, choose WAV and press Speak from the keyboard."""
    page.get_by_label("Text", exact=True).fill(text)
    page.get_by_label("Format", exact=True).select_option("wav")
    page.get_by_role("button", name="Speak").focus()
    page.keyboard.press("Enter")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (apt-get install chromium; .ci/run does)")
def test_the_web_page_submits_a_sentence_and_plays_it(service: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    url = service["url"]
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(url + "/")
            # Given the page, with the voices and formats of this deployment and no key field
            # (no voice named at first: the text's language picks it, here the default "tiny")
            voice = page.get_by_label("Voice", exact=True)
            assert voice.input_value() == "" and "default tiny" in voice.inner_text()
            assert not page.locator("#key-section").is_visible()
            # When a sentence is typed and submitted with the keyboard
            speak(page, f"The page speaks {uuid.uuid4().hex[:6]}.")
            # Then the status says done and the player holds audio that plays
            page.wait_for_selector("#result:not([hidden])", timeout=30_000)
            assert "Done" in page.locator("#speak-status").inner_text()
            page.wait_for_function("() => document.getElementById('player').readyState >= 1", timeout=15_000)
            duration = page.evaluate("document.getElementById('player').duration")
            assert duration > 0
            played = page.evaluate("""async () => {
                const player = document.getElementById('player');
                await player.play();
                await new Promise((resolve) => setTimeout(resolve, 300));
                return {time: player.currentTime, paused: player.paused, ended: player.ended,
                        error: player.error};
            }""")
            # (the tiny voice's audio is shorter than the wait: it has played to its end)
            assert played["error"] is None and played["time"] > 0, played
            assert played["ended"] or not played["paused"], played
            assert page.locator("#download").get_attribute("download").endswith(".wav")
            # And the recent list shows the task
            page.get_by_role("button", name="Refresh").click()
            page.wait_for_function("() => document.querySelectorAll('#recent-tasks li').length > 0",
                                   timeout=10_000)
            page.screenshot(path=str(ARTIFACTS / "web-page.png"), full_page=True)
            assert errors == []
        finally:
            browser.close()
    assert (ARTIFACTS / "web-page.png").stat().st_size > 0


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (apt-get install chromium; .ci/run does)")
def test_the_web_page_works_with_keys_on(service: dict[str, Any]) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page()
            page.goto(service["keyed_url"] + "/")
            # Given a service that requires keys: the page asks for one
            assert page.get_by_label("Key", exact=True).is_visible()
            # When a sentence is submitted without a key, the page says why it was refused
            speak(page, f"No key {uuid.uuid4().hex[:6]}.")
            page.wait_for_function(
                "() => document.getElementById('speak-status').textContent.includes('unauthorized')",
                timeout=10_000)
            # When the key is entered, the same submission is spoken and its audio, fetched with
            # the key, plays in the page
            page.get_by_label("Key", exact=True).fill(service["key"])
            page.get_by_label("Key", exact=True).dispatch_event("change")
            speak(page, f"With a key {uuid.uuid4().hex[:6]}.")
            page.wait_for_selector("#result:not([hidden])", timeout=30_000)
            page.wait_for_function("() => document.getElementById('player').duration > 0", timeout=15_000)
            assert page.locator("#player").get_attribute("src").startswith("blob:")
            # And the recent tasks are this key's own: the one it made, not the open API's
            page.get_by_role("button", name="Refresh").click()
            page.wait_for_function("() => document.querySelectorAll('#recent-tasks li button').length == 1",
                                   timeout=10_000)
            page.screenshot(path=str(ARTIFACTS / "web-page-keyed.png"), full_page=True)
        finally:
            browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (apt-get install chromium; .ci/run does)")
def test_the_web_page_renders_a_book_and_plays_its_chapter(service: dict[str, Any], tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    book = tmp_path / "story.txt"
    tag = uuid.uuid4().hex[:6]
    book.write_text(f"A Short Story {tag}\n\nThe fox ran over the hill and into the woods. It was late.\n\n"
                    "The moon came up over the trees, and the fox went home to sleep.\n", encoding="utf-8")
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page()
            page.goto(service["url"] + "/")
            # When a book file is chosen and rendered as WAV chapters
            page.get_by_label("Book (EPUB, text, Markdown, HTML)").set_input_files(str(book))
            page.get_by_label("Chapter format", exact=True).select_option("wav")
            with page.expect_response(lambda r: r.url.endswith("/v1/books") and r.request.method == "POST",
                                      timeout=BOOK_DEADLINE_MS) as posted:
                page.get_by_role("button", name="Render the book").click()
            status_url = posted.value.json()["status_url"]
            # Then the book gets done (its chapter assembled, then its M4B: a chapter can play
            # before the book is done, so the page is asked only once the API says done)
            book = wait_until(lambda: (b := requests.get(status_url, timeout=10).json())["status"] in (
                "done", "failed") and b, timeout=BOOK_DEADLINE_MS / 1000, interval=0.5)
            assert book["status"] == "done", book
            # And the page, on its next poll, says so, its progress bar full, and plays the chapter
            page.wait_for_function(
                "() => document.getElementById('book-status').textContent.includes(': done,')",
                timeout=BOOK_DEADLINE_MS)
            progress = page.locator("#book-progress")
            assert progress.get_attribute("value") == progress.get_attribute("max")
            play = page.get_by_role("button", name="Play chapter 1")
            play.click()
            page.wait_for_function("() => { const a = document.querySelector('#chapters audio');"
                                   " return a !== null && a.duration > 0; }", timeout=15_000)
        finally:
            browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (apt-get install chromium; .ci/run does)")
def test_the_reader_view_follows_the_audio_and_the_cli_fetches_the_epub(service: dict[str, Any],
                                                                        tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    # Given a text book of eight sentences, then markup, entities and characters XML forbids,
    # rendered through the API
    tag = uuid.uuid4().hex[:6]
    text = (f"Reading Along {tag}\n\n" + " ".join(
        f"Sentence number {n} tells of the fox and the {word}." for n, word in enumerate(
            ["hill", "woods", "river", "moon", "trees", "stars", "road", "house"], start=1))
        + '\n\nThen <script>alert("x")</script> & <img src=x onerror=y> ]]> and a bell\x07 rang.\n')
    created = requests.post(f"{service['url']}/v1/books", timeout=20,
                            json={"text": text, "title": f"Along {tag}", "format": "mp3"}).json()
    book_id = created["book_id"]
    book = wait_until(lambda: (b := requests.get(created["status_url"], timeout=10).json())["status"] in (
        "done", "failed") and b, timeout=120)
    assert book["status"] == "done" and book["epub_url"].endswith(f"/v1/books/{book_id}/readalong.epub")
    manifest = requests.get(f"{service['url']}/v1/books/{book_id}/manifest", timeout=10).json()
    sentences = manifest["chapters"][0]["sentences"]
    assert len(sentences) >= 8
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(service["url"] + "/")
            # When the book is opened from the recent list and chapter 1 is read along
            page.get_by_role("button", name="Refresh").click()
            page.get_by_role("button", name=re.compile(f"Along {tag}")).click()
            page.get_by_role("button", name="Read along chapter 1").click()
            page.wait_for_function("() => document.getElementById('reader-audio').duration > 0",
                                   timeout=15_000)
            # Then seeking into the middle of sampled sentences highlights each of them
            for index in (1, 4, len(sentences) - 2):
                middle = (sentences[index]["start_s"] + sentences[index]["end_s"]) / 2
                active = page.evaluate("""async (time) => {
                    const audio = document.getElementById('reader-audio');
                    audio.currentTime = time;
                    await new Promise((resolve) => audio.addEventListener('seeked', resolve, {once: true}));
                    await new Promise((resolve) => setTimeout(resolve, 50));
                    const active = document.querySelector('#reader-text .sentence.active');
                    return active ? active.id : null;
                }""", middle)
                assert active == f"reader-s{index + 1}", (index, active)
            # And playing for 2 s from the first sentence moves the highlight forward
            start = page.evaluate("""async (time) => {
                const audio = document.getElementById('reader-audio');
                audio.currentTime = time;
                await new Promise((resolve) => audio.addEventListener('seeked', resolve, {once: true}));
                await audio.play();
                const first = document.querySelector('#reader-text .sentence.active').id;
                await new Promise((resolve) => setTimeout(resolve, 2000));
                audio.pause();
                return [first, document.querySelector('#reader-text .sentence.active').id, audio.currentTime];
            }""", sentences[0]["start_s"] + 0.01)
            first, later, played = start
            assert first == "reader-s1" and played > 1.0, start
            assert int(later.removeprefix("reader-s")) > 1, start
            # And clicking a sentence plays from its start, highlighted
            page.locator("#reader-s6").click()
            page.wait_for_function("() => document.querySelector('#reader-text .sentence.active')?.id === "
                                   "'reader-s6'", timeout=5_000)
            page.screenshot(path=str(ARTIFACTS / "reader-view.png"), full_page=True)
            assert errors == []
        finally:
            browser.close()
    # When the CLI fetches the book with --epub (202 while it is built, then the file)
    run = subprocess.run([sys.executable, "-m", "tts_queue.cli", "book", "fetch", book_id, "--out",
                          str(tmp_path / "out"), "--epub", "--api", service["url"]],
                         capture_output=True, text=True, timeout=180, check=False)
    assert run.returncode == 0, run.stderr
    # Then the EPUB is there beside the chapter files, the hostile text in it as text, and
    # EPUBCheck finds nothing to report
    (path,) = (tmp_path / "out").glob("*.epub")
    with zipfile.ZipFile(path) as epub:
        assert epub.read("mimetype") == b"application/epub+zip"
        xhtml = epub.read("OEBPS/chapter-001.xhtml").decode()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;img" in xhtml
    assert "<script" not in xhtml and "\x07" not in xhtml
    assert epubcheck(path) == []
