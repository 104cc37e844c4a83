"""Fairness between keys, as a client sees it: one key's short requests beside another key's long work
(``--same-key``: beside the same key's, fairness within one tenant).

Run from the repository root (10-20 minutes on 2 cores; a tree with unfair order takes longer,
since every wait there runs to its bound)::

    .venv/bin/python bench/bench_fairness.py --label after [--tree PATH] [--out PATH]
                                             [--only idle|english|japanese|book|many ...]
                                             [--same-key]
    .venv/bin/python bench/bench_fairness.py --lanes-rounds 5 [--tree PATH]

``--tree`` is the source tree whose service is measured (default: this repository). The service
runs that tree's own code: ``tts-queue up`` is started with the same interpreter, ``cwd`` and
``PYTHONPATH`` set to the tree, and the run records where the service's processes import
``tts_queue`` from. An older commit is measured from a worktree, e.g.
``git worktree add /tmp/tts-before 6a0867e`` then ``--tree /tmp/tts-before --label before``.

Every scenario starts ``tts-queue up`` on a fresh data directory with ``TTS_AUTH=required`` and two
keys made with ``tts-queue keys create`` (A: the long work, B: the short requests), and is stopped
after it, so a long render never bleeds into the next scenario (``--same-key``: B's requests are
sent with A's key, so both are one tenant, as every local client is with keys off):

(1) ``idle``: B's one-sentence ``POST /tts?wait=30`` (unique texts), p50/p95;
(2) ``english``: beside one request of A of unique long English sentences at an SSML rate of 0.1
    (``<prosody rate="25%"><prosody rate="40%">``);
(3) ``japanese``: beside one request of A of about 1,500 characters of unique Japanese sentences
    (``jf_alpha``, Kokoro);
(4) ``book``: beside A's rendering of a book (the Sherlock Holmes EPUB, ``POST /v1/books``);
(5) ``many``: beside 16 different long English requests of A at speed 0.25.

In (2)-(5) B's requests start at a fixed pace once A's work is running (open loop, so one slow
answer does not delay the next question): their p50, p95 and the first one's latency, each as a
ratio to idle, and each B task's ``timings.queue_ms`` (claimed at once or not). A request not
answered within ``--bound`` seconds counts as that bound and is marked as a timeout. The long work
is abandoned once B is measured. A 202 from ``POST /tts`` is followed by long-polls of its task.

``--lanes-rounds N`` instead runs the tree's ``bench/bench_clients.py --only lanes`` N times and
writes the median and range of its p95 with a book over p95 idle.

Results go to a JSON file (ratios: these machines are noisy); nothing here is asserted.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT.parent / "shared" / "data" / "sherlock-holmes.epub"
SCENARIOS = ("idle", "english", "japanese", "book", "many")
# room for the long requests (the same for every tree measured): the English one at rate 0.1 is
# about 40 minutes of audio, over the default TTS_MAX_AUDIO_S (1800) and TTS_MAX_TEXT_CHARS (5000)
LIMITS = {"TTS_MAX_AUDIO_S": "14400", "TTS_MAX_TEXT_CHARS": "20000"}
FINISHED = ("done", "failed", "cancelled")


# --- texts -------------------------------------------------------------------------------------

ADJECTIVES = ("quiet", "patient", "crooked", "silver", "distant", "careful", "weary", "bright", "humble",
              "restless", "gentle", "stubborn", "ancient", "narrow", "golden", "hollow")
NOUNS = ("keeper", "sailor", "baker", "painter", "teacher", "miller", "farmer", "doctor", "weaver",
         "hunter", "printer", "tailor", "porter", "gardener", "fiddler", "shepherd")
PLACES = ("harbour", "orchard", "market", "chapel", "meadow", "library", "station", "bridge", "garden",
          "mill", "valley", "square", "tavern", "forest", "courtyard", "lighthouse")
VERBS = ("carried", "followed", "painted", "mended", "answered", "watched", "gathered", "described",
         "remembered", "measured", "questioned", "discovered")


def english_sentences(n: int, seed: int) -> list[str]:
    """``n`` unique long English sentences (about 25 words, no digits)."""
    rng = random.Random(seed)
    seen: set[str] = set()
    while len(seen) < n:
        a, b, c = rng.sample(ADJECTIVES, 3)
        n1, n2, n3 = rng.sample(NOUNS, 3)
        p1, p2 = rng.sample(PLACES, 2)
        v1, v2 = rng.sample(VERBS, 2)
        seen.add(f"The {a} {n1} from the {p1} {v1} the {b} {n2} all the way across the {p2}, "
                 f"while an old {c} {n3} {v2} every word of the story until the evening grew late.")
    return sorted(seen, key=lambda s: rng.random())


JA_WHO = ("私の兄", "隣の猫", "町の先生", "若い医者", "古い友人", "小さな子供", "山の猟師", "海辺の漁師")
JA_WHERE = ("駅の前で", "静かな森で", "川のほとりで", "古い寺で", "市場の片隅で", "雨の公園で",
            "夜の図書館で", "雪の峠で")
JA_WHAT = ("長い手紙を書きました", "懐かしい歌を歌いました", "白い花を摘みました", "分厚い本を読みました",
           "大きな魚を釣りました", "美しい絵を描きました", "すっかり道に迷いました", "不思議な昔話をしました")
JA_WHEN = ("朝早く", "昼過ぎに", "夕方になって", "夜遅く")


def japanese_text(chars: int, seed: int) -> str:
    """About ``chars`` characters of unique Japanese sentences."""
    combos = list(itertools.product(JA_WHEN, JA_WHO, JA_WHERE, JA_WHAT))
    random.Random(seed).shuffle(combos)
    text = ""
    for when, who, where, what in combos:
        if len(text) >= chars:
            break
        text += f"{when}、{who}は{where}{what}。"
    return text


def short_text(label: str, i: int) -> str:
    return f"Short request {label} {i} {uuid.uuid4().hex[:6]}."


# --- the service -------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tree_env(tree: Path, overrides: dict[str, str]) -> dict[str, str]:
    """The environment that makes a Python process import ``tree``'s code with ``overrides``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_") and k != "PYTHONPATH"}
    env.update(overrides, PYTHONPATH=str(tree))
    return env


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def where_imported(tree: Path, env: dict[str, str], up: subprocess.Popen[bytes]) -> dict[str, Any]:
    """Where ``tts_queue`` comes from in this environment, and each service process's cwd and PYTHONPATH."""
    module = subprocess.run([sys.executable, "-c", "import tts_queue; print(tts_queue.__file__)"],
                            cwd=tree, env=env, capture_output=True, text=True, check=True).stdout.strip()
    processes = []
    for pid in [up.pid, *descendants(up.pid)]:
        try:
            proc = Path(f"/proc/{pid}")
            cmd = proc.joinpath("cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
            environ = dict(item.split("=", 1) for item in
                           proc.joinpath("environ").read_bytes().decode().split("\0") if "=" in item)
            processes.append({"pid": pid, "cmd": cmd, "cwd": os.readlink(proc / "cwd"),
                              "PYTHONPATH": environ.get("PYTHONPATH")})
        except OSError:
            continue
    return {"tts_queue_file": module, "processes": processes}


class Service:
    """One ``tts-queue up`` of ``tree`` on a fresh data directory, with keys A and B."""

    def __init__(self, tree: Path, overrides: dict[str, str], same_key: bool = False) -> None:
        self.tree = tree
        self.tmp = tempfile.TemporaryDirectory(prefix="tts-fair-")
        self.data_dir = Path(self.tmp.name)
        self.env = tree_env(tree, overrides | {"TTS_AUTH": "required"})
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log = self.data_dir / "up.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tts_queue.cli", "up", "--data-dir", str(self.data_dir), "--port",
             str(port), "--workers", "1"],
            cwd=tree, env=self.env, stdout=open(self.log, "ab"), stderr=subprocess.STDOUT,  # noqa: SIM115
            start_new_session=True)
        started = time.monotonic()
        self._ready(180)
        self.ready_s = time.monotonic() - started
        # A queues a whole book (about 6,400 sentences) at once: over the default quota (2,000)
        self.keys = {"fair-a": self._key("fair-a", "--max-queued", "20000"), "fair-b": self._key("fair-b")}
        if same_key:  # one tenant: B's short requests beside its own long work
            self.keys["fair-b"] = self.keys["fair-a"]

    def _ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.5)
        self.stop()
        raise SystemExit(f"{self.url}/readyz did not answer 200 within {timeout_s:.0f} s; see {self.log}")

    def _key(self, name: str, *options: str) -> str:
        done = subprocess.run([sys.executable, "-m", "tts_queue.cli", "keys", "create", name, *options,
                               "--data-dir", str(self.data_dir)], cwd=self.tree, env=self.env,
                              capture_output=True, text=True, check=True)
        return done.stdout.strip().splitlines()[-1]

    def session(self, name: str) -> requests.Session:
        http = requests.Session()
        http.headers["Authorization"] = f"Bearer {self.keys[name]}"
        return http

    def stop(self) -> None:
        """SIGTERM (a busy worker gets its grace), then the whole process group is killed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=45)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # leftovers of our own group
        except (ProcessLookupError, PermissionError):
            pass
        self.process.wait(timeout=10)
        self.tmp.cleanup()


# --- B's short requests ------------------------------------------------------------------------

def one_short(service: Service, text: str, bound_s: float) -> dict[str, Any]:
    """One ``POST /tts?wait=30`` to audio (202: long-poll its task), at most ``bound_s``."""
    started = time.perf_counter()
    deadline = started + bound_s

    def left() -> float:
        return deadline - time.perf_counter()

    outcome: dict[str, Any] = {"timeout": False}
    with service.session("fair-b") as http:
        try:
            response = http.post(f"{service.url}/tts", params={"wait": min(30, max(1, int(left())))},
                                 json={"text": text}, timeout=left() + 5)
            if response.status_code == 202:
                task = response.json()
                outcome["task_id"] = task.get("task_id")
                while task["status"] not in FINISHED and left() > 0:
                    task = http.get(task["status_url"], params={"wait": max(1, min(30, int(left())))},
                                    timeout=left() + 5).json()
                outcome["status"] = task["status"] if task["status"] in FINISHED else "timeout"
            else:
                outcome["status"] = "done" if response.status_code == 200 else f"http {response.status_code}"
        except requests.RequestException as exc:
            outcome["status"] = f"error {type(exc).__name__}"
    elapsed = time.perf_counter() - started
    if elapsed >= bound_s or outcome["status"] == "timeout":
        outcome.update(timeout=True, status="timeout")
        elapsed = bound_s
    outcome["s"] = round(elapsed, 3)
    return outcome


def paced_shorts(
    service: Service, label: str, n: int, every_s: float, bound_s: float
) -> list[dict[str, Any]]:
    """``n`` short requests of B, one started every ``every_s`` seconds, each bounded."""
    results: list[dict[str, Any]] = [{} for _ in range(n)]

    def run(i: int) -> None:
        results[i] = one_short(service, short_text(label, i), bound_s)

    threads = []
    for i in range(n):
        thread = threading.Thread(target=run, args=(i,))
        thread.start()
        threads.append(thread)
        time.sleep(every_s)
    for thread in threads:
        thread.join()
    return results


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def b_tasks(service: Service, exclude: set[str]) -> dict[str, list[Any]]:
    """B's tasks not in ``exclude``, oldest first: ``timings.queue_ms`` (written when a task ends),
    the claim delay read from ``started_at - created_at`` (None: never claimed), and the status."""
    with service.session("fair-b") as http:
        listed = http.get(f"{service.url}/v1/tasks", params={"limit": 100}, timeout=30).json()
        rows = listed.get("tasks", listed) if isinstance(listed, dict) else listed
    rows = [row for row in reversed(rows) if row["task_id"] not in exclude]

    def claimed_after(row: dict[str, Any]) -> float | None:
        if not row.get("started_at"):
            return None
        delay = datetime.fromisoformat(row["started_at"]) - datetime.fromisoformat(row["created_at"])
        return round(delay.total_seconds() * 1000, 1)

    return {"queue_ms": [(row.get("timings") or {}).get("queue_ms") for row in rows],
            "claimed_after_ms": [claimed_after(row) for row in rows],
            "task_statuses": [row["status"] for row in rows]}


def task_ids(service: Service) -> set[str]:
    with service.session("fair-b") as http:
        listed = http.get(f"{service.url}/v1/tasks", params={"limit": 100}, timeout=30).json()
    rows = listed.get("tasks", listed) if isinstance(listed, dict) else listed
    return {row["task_id"] for row in rows}


def summary(shorts: list[dict[str, Any]]) -> dict[str, Any]:
    times = [r["s"] for r in shorts]
    return {"n": len(times), "p50_s": statistics.median(times), "p95_s": percentile(times, 0.95),
            "first_s": times[0], "max_s": max(times), "timeouts": sum(r["timeout"] for r in shorts),
            "statuses": sorted({r["status"] for r in shorts}), "latencies_s": times}


# --- A's long work -----------------------------------------------------------------------------

def submit_long(service: Service, scenario: str, book: Path) -> tuple[list[str], str]:
    """A's long work for ``scenario``: its status URLs, and what it is."""
    payloads: list[dict[str, Any]]
    with service.session("fair-a") as http:
        if scenario == "book":
            with open(book, "rb") as handle:
                answer = http.post(f"{service.url}/v1/books", files={"file": (book.name, handle)},
                                   data={"format": "mp3"}, timeout=120)
            assert answer.status_code in (200, 201, 202), answer.text
            return [answer.json()["status_url"]], f"the book {book.name}"
        if scenario == "english":
            sentences = english_sentences(40, seed=2)
            ssml = ('<speak><prosody rate="25%"><prosody rate="40%">' + " ".join(sentences)
                    + "</prosody></prosody></speak>")
            payloads = [{"text": ssml, "text_type": "ssml"}]
            what = (f"{len(sentences)} unique long English sentences at an SSML rate of 0.1 "
                    f"({len(ssml)} chars)")
        elif scenario == "japanese":
            text = japanese_text(1500, seed=3)
            payloads = [{"text": text, "voice": "jf_alpha"}]
            what = f"{len(text)} characters of unique Japanese sentences (jf_alpha)"
        else:  # many
            pool = english_sentences(16 * 8, seed=5)
            payloads = [{"text": " ".join(pool[i * 8:(i + 1) * 8]), "speed": 0.25} for i in range(16)]
            what = "16 different requests of 8 unique long English sentences each at speed 0.25"
        urls = []
        for payload in payloads:
            answer = http.post(f"{service.url}/v1/tts", json=payload, timeout=60)
            assert answer.status_code in (200, 202), answer.text
            urls.append(answer.json()["status_url"])
        return urls, what


def wait_rendering(service: Service, urls: list[str], scenario: str, timeout_s: float = 180) -> float:
    """Seconds until A's work is running (a book: parsed), plus a few seconds in full swing."""
    started = time.monotonic()
    with service.session("fair-a") as http:
        while time.monotonic() - started < timeout_s:
            states = [http.get(url, timeout=30).json()["status"] for url in urls]
            if scenario == "book" and all(s != "parsing" for s in states):
                break
            if scenario != "book" and any(s == "running" for s in states):
                break
            time.sleep(0.5)
    waited = time.monotonic() - started
    time.sleep(5 if scenario == "book" else 3)
    return waited


def progress(service: Service, urls: list[str]) -> list[dict[str, Any]]:
    with service.session("fair-a") as http:
        rows = [http.get(url, timeout=30).json() for url in urls]
    keep = ("status", "sentences_done", "sentences_total", "progress", "error")
    return [{k: row.get(k) for k in keep if k in row} for row in rows]


# --- a run -------------------------------------------------------------------------------------

def scenario_run(tree: Path, scenario: str, args: argparse.Namespace, overrides: dict[str, str],
                 check_imports: bool) -> dict[str, Any]:
    service = Service(tree, overrides, args.same_key)
    out: dict[str, Any] = {"ready_s": round(service.ready_s, 1)}
    try:
        if check_imports:
            out["imports"] = where_imported(tree, service.env, service.process)
            print(f"  service imports tts_queue from {out['imports']['tts_queue_file']}", flush=True)
        one_short(service, short_text("warm", 0), args.bound)  # the voice loaded
        if scenario == "idle":
            before = task_ids(service)
            shorts = paced_shorts(service, "idle", args.idle_n, args.idle_every, args.bound)
        else:
            before = task_ids(service)
            started = time.monotonic()
            urls, out["long_work"] = submit_long(service, scenario, Path(args.book))
            before |= {url.rstrip("/").rsplit("/", 1)[-1] for url in urls}  # B's tasks only
            out["long_running_after_s"] = round(wait_rendering(service, urls, scenario), 1)
            shorts = paced_shorts(service, scenario, args.busy_n, args.busy_every, args.bound)
            out["long_progress_after"] = progress(service, urls)
            # the measure holds only if the long work was still there to compete with
            out["long_still_rendering"] = any(p["status"] not in FINISHED for p in out["long_progress_after"])
            out["long_elapsed_s"] = round(time.monotonic() - started, 1)
        out.update(summary(shorts))
        out.update(b_tasks(service, before))
    finally:
        service.stop()
    return out


def git_of(tree: Path) -> dict[str, Any]:
    def git(*cmd: str) -> str:
        return subprocess.run(["git", "-C", str(tree), *cmd], capture_output=True, text=True).stdout.strip()
    return {"commit": git("rev-parse", "HEAD"), "subject": git("log", "-1", "--format=%s"),
            "dirty_files": git("status", "--porcelain", "--untracked-files=no").splitlines()}


def machine() -> dict[str, Any]:
    return {"cpu_count": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "loadavg_at_start": os.getloadavg()}


def fairness(args: argparse.Namespace) -> int:
    tree = Path(args.tree).resolve()
    overrides = LIMITS | dict(item.split("=", 1) for item in args.set)
    scenarios = [s for s in SCENARIOS if s in (args.only or SCENARIOS)]
    if "idle" not in scenarios:
        scenarios.insert(0, "idle")  # every ratio is to this run's own idle
    results: dict[str, Any] = {
        "label": args.label, "tree": str(tree), "git": git_of(tree), "machine": machine(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": {"overrides": overrides, "bound_s": args.bound, "idle_n": args.idle_n,
                     "idle_every_s": args.idle_every, "busy_n": args.busy_n, "busy_every_s": args.busy_every,
                     "workers": 1, "auth": "required", "same_key": args.same_key},
        "scenarios": {}, "not_run": {},
    }
    for n, scenario in enumerate(scenarios):
        print(f"{args.label}: {scenario}", flush=True)
        started = time.monotonic()
        try:
            result = scenario_run(tree, scenario, args, overrides, check_imports=n == 0)
        except (AssertionError, requests.RequestException, subprocess.CalledProcessError) as exc:
            results["not_run"][scenario] = f"{type(exc).__name__}: {exc}"[:500]
            print(f"  not run: {results['not_run'][scenario]}", flush=True)
            continue
        result["wall_s"] = round(time.monotonic() - started, 1)
        if "imports" in result:
            results["imports"] = result.pop("imports")
        results["scenarios"][scenario] = result
        print(f"  p50 {result['p50_s']:.2f} s, p95 {result['p95_s']:.2f} s, first {result['first_s']:.2f} s, "
              f"timeouts {result['timeouts']}/{result['n']}, queue_ms {result['queue_ms']}, "
              f"claimed after ms {result.get('claimed_after_ms')}, "
              f"{result['wall_s']:.0f} s", flush=True)
    idle = results["scenarios"].get("idle")
    if idle:
        for result in results["scenarios"].values():
            result["ratio"] = {"p50": result["p50_s"] / idle["p50_s"], "p95": result["p95_s"] / idle["p95_s"],
                               "first_over_idle_p50": result["first_s"] / idle["p50_s"]}
    out = Path(args.out or ROOT / f"bench/results/fairness_{args.label}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    write_summary(out.parent)
    return 0


def write_summary(results_dir: Path) -> None:
    """``fairness.json``: the ratios of every ``fairness_<label>.json`` side by side, and a table."""
    runs = {}
    for path in sorted(results_dir.glob("fairness_*.json")):
        data = json.loads(path.read_text())
        runs[data["label"]] = {
            "file": path.name, "commit": data["git"]["commit"][:7], "date": data["date"],
            "not_run": data["not_run"],
            "scenarios": {name: {"p50_s": r["p50_s"], "p95_s": r["p95_s"], "first_s": r["first_s"],
                                 "timeouts": r["timeouts"], "n": r["n"], "ratio": r.get("ratio"),
                                 "long_still_rendering": r.get("long_still_rendering"),
                                 "queue_ms_max": max((q for q in r["queue_ms"] if q is not None),
                                                     default=None),
                                 "claimed_after_ms_max": max((q for q in r.get("claimed_after_ms", [])
                                                              if q is not None), default=None),
                                 "never_claimed": sum(q is None for q in r.get("claimed_after_ms", []))}
                          for name, r in data["scenarios"].items()}}
    (results_dir / "fairness.json").write_text(json.dumps(
        {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "runs": runs}, indent=2))
    print(f"{'scenario':10} {'run':8} {'p50 s':>7} {'p95 s':>7} {'first s':>8} {'p50 x':>7} {'p95 x':>7} "
          f"{'first x':>8} {'timeouts':>8} {'claimed after ms max':>20}")
    for name in SCENARIOS:
        for label, run in runs.items():
            r = run["scenarios"].get(name)
            if r is None:
                print(f"{name:10} {label:8} not run: {run['not_run'].get(name, 'not asked')}"[:110])
                continue
            ratio = r["ratio"] or {}
            claim = r.get("claimed_after_ms_max")
            qmax = "-" if claim is None else f"{claim:.0f}"
            if r.get("never_claimed"):
                qmax += f" ({r['never_claimed']} never)"
            print(f"{name:10} {label:8} {r['p50_s']:7.2f} {r['p95_s']:7.2f} {r['first_s']:8.2f} "
                  f"{ratio.get('p50', 0):7.2f} {ratio.get('p95', 0):7.2f} "
                  f"{ratio.get('first_over_idle_p50', 0):8.2f} "
                  f"{r['timeouts']:>5}/{r['n']:<2} {qmax:>20}"
                  f"{'  (the long work had ended)' if r['long_still_rendering'] is False else ''}")


def lanes_rounds(args: argparse.Namespace) -> int:
    """The tree's ``bench_clients.py --only lanes``, ``--lanes-rounds`` times: p95 book/idle."""
    tree = Path(args.tree).resolve()
    env = tree_env(tree, dict(item.split("=", 1) for item in args.set))
    rounds: list[dict[str, Any]] = []
    cmd: list[str] = []
    with tempfile.TemporaryDirectory(prefix="tts-lanes-") as tmp:
        for n in range(args.lanes_rounds):
            out = Path(tmp) / f"lanes_{n}.json"
            started = time.monotonic()
            cmd = [sys.executable, "bench/bench_clients.py", "--only", "lanes", "--book", args.book,
                   "--out", str(out)]
            done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
            wall = time.monotonic() - started
            if done.returncode != 0 or not out.is_file():
                rounds.append({"error": (done.stderr or done.stdout)[-500:], "wall_s": round(wall, 1)})
                print(f"round {n}: failed after {wall:.0f} s", flush=True)
                continue
            lanes = json.loads(out.read_text())["lanes"]
            rounds.append(lanes | {"wall_s": round(wall, 1)})
            print(f"round {n}: p95 idle {lanes['idle_p95_s']:.3f} s, with book {lanes['book_p95_s']:.3f} s, "
                  f"ratio {lanes['p95_ratio']:.2f} ({wall:.0f} s)", flush=True)
            if n == 0 and wall > args.round_limit and args.lanes_rounds > 3:
                print(f"a round took {wall:.0f} s (> {args.round_limit:.0f}): 3 rounds only", flush=True)
                args.lanes_rounds = 3
            if n + 1 >= args.lanes_rounds:
                break
    ratios: list[float] = [r["p95_ratio"] for r in rounds if "p95_ratio" in r]
    ratio = {"median": statistics.median(ratios) if ratios else None,
             "min": min(ratios, default=None), "max": max(ratios, default=None), "n": len(ratios)}
    results: dict[str, Any] = {
        "what": ("bench_clients.py --only lanes: one-sentence POST /tts p95 with the book rendering "
                 "over p95 idle"),
        "command": " ".join(cmd), "tree": str(tree), "git": git_of(tree), "machine": machine(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "rounds": rounds,
        "p95_ratio": ratio,
    }
    out_path = Path(args.out or ROOT / "bench/results/lanes_rounds.json")
    out_path.write_text(json.dumps(results, indent=2))
    print(f"p95 with book / p95 idle over {len(ratios)} rounds: median {ratio['median']}, "
          f"range {ratio['min']} - {ratio['max']}")
    print(f"wrote {out_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", default=str(ROOT), help="the source tree whose service is measured")
    parser.add_argument("--label", default="after", help="names the result: fairness_<label>.json")
    parser.add_argument("--out", help="default bench/results/fairness_<label>.json (lanes_rounds.json)")
    parser.add_argument("--only", choices=SCENARIOS, action="append",
                        help="these scenarios (idle always runs)")
    parser.add_argument("--book", default=str(BOOK))
    parser.add_argument("--bound", type=float, default=120.0, help="a short request's longest wait, s")
    parser.add_argument("--same-key", action="store_true", help="B's requests with A's key: one tenant")
    parser.add_argument("--idle-n", type=int, default=15)
    parser.add_argument("--idle-every", type=float, default=1.0)
    parser.add_argument("--busy-n", type=int, default=12)
    parser.add_argument("--busy-every", type=float, default=1.5)
    parser.add_argument("--set", action="append", default=[], metavar="TTS_NAME=VALUE",
                        help="a setting for the service (after the benchmark's own limits)")
    parser.add_argument("--lanes-rounds", type=int, default=0,
                        help="run bench_clients' lanes N times instead")
    parser.add_argument("--round-limit", type=float, default=240.0,
                        help="with --lanes-rounds: a first round longer than this cuts the rounds to 3")
    args = parser.parse_args(argv)
    return lanes_rounds(args) if args.lanes_rounds else fairness(args)


if __name__ == "__main__":
    sys.exit(main())
