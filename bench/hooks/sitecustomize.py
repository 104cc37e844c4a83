"""Bench-only hooks (a bench puts this directory first on the service's PYTHONPATH, so every
process imports it at start-up). Nothing else loads it.

- ``TTS_BENCH_SQL_DIR`` (``bench/bench_overhead.py``'s SQL pass): every SQL statement and
  transaction the process runs is counted (``bench/sqlcount.py``) and the counts are written to
  ``$TTS_BENCH_SQL_DIR/<pid>.json``.
- ``TTS_BENCH_YAPPI_OUT`` (``bench/profile_worker.py``): in the Celery worker process only, yappi
  profiles every thread on the CPU clock for ``TTS_BENCH_YAPPI_SECONDS``, starting
  ``TTS_BENCH_YAPPI_AFTER_S`` after start-up; ``<out>.started`` marks the start, ``<out>`` (pstats)
  the end.
"""

import os
import sys
import threading
from pathlib import Path

_DIR = os.environ.get("TTS_BENCH_SQL_DIR")

if _DIR:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from sqlcount import SqlCounter

    _COUNTER = SqlCounter().install()
    _COUNTER.write_every(Path(_DIR), float(os.environ.get("TTS_BENCH_SQL_EVERY_S", "0.1")))


def _yappi(out: str, after_s: float, seconds: float) -> None:
    """Profile this process's threads on the CPU clock for ``seconds``, after ``after_s``."""
    import time

    import yappi

    time.sleep(after_s)
    yappi.set_clock_type("cpu")
    Path(out + ".started").write_text(str(time.time()))
    yappi.start(builtins=True, profile_threads=True)
    time.sleep(seconds)
    yappi.stop()
    yappi.get_func_stats().save(out + ".tmp", "pstat")
    os.replace(out + ".tmp", out)


_OUT = os.environ.get("TTS_BENCH_YAPPI_OUT")
# sys.argv is not set yet when site runs: the command line is read from /proc
_COMMAND = Path("/proc/self/cmdline").read_bytes().split(b"\0") if _OUT else []
if _OUT and b"celery" in b" ".join(_COMMAND) and b"worker" in _COMMAND:
    threading.Thread(target=_yappi, name="bench-yappi", daemon=True, args=(
        _OUT, float(os.environ.get("TTS_BENCH_YAPPI_AFTER_S", "15")),
        float(os.environ.get("TTS_BENCH_YAPPI_SECONDS", "15")))).start()
