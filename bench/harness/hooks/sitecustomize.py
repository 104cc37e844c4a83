"""Loaded into every process of a service whose ``PYTHONPATH`` starts with this folder (the shim
that holds ``bench`` follows it), nowhere else:

- ``TTS_BENCH_SQL_DIR`` (the ``overhead`` scenario): every SQL statement and transaction the process
  runs is counted (``bench.harness.sql``) and written to ``$TTS_BENCH_SQL_DIR/<pid>.json``.
- ``TTS_BENCH_YAPPI_OUT`` (``tools/profile_worker.py``): in the Celery worker process only, yappi
  profiles every thread on the CPU clock for ``TTS_BENCH_YAPPI_SECONDS``, starting
  ``TTS_BENCH_YAPPI_AFTER_S`` after start-up; ``<out>.started`` marks the start, ``<out>`` (pstats)
  the end.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def _count_sql(directory: str) -> None:
    from bench.harness.sql import SqlCounter

    SqlCounter().install().write_every(Path(directory), float(os.environ.get("TTS_BENCH_SQL_EVERY_S", "0.1")))


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


if os.environ.get("TTS_BENCH_SQL_DIR"):
    _count_sql(os.environ["TTS_BENCH_SQL_DIR"])

_OUT = os.environ.get("TTS_BENCH_YAPPI_OUT")
# sys.argv is not set yet when site runs: the command line is read from /proc
_COMMAND = Path("/proc/self/cmdline").read_bytes().split(b"\0") if _OUT else []
if _OUT and b"celery" in b" ".join(_COMMAND) and b"worker" in _COMMAND:
    threading.Thread(target=_yappi, name="bench-yappi", daemon=True, args=(
        _OUT, float(os.environ.get("TTS_BENCH_YAPPI_AFTER_S", "15")),
        float(os.environ.get("TTS_BENCH_YAPPI_SECONDS", "15")))).start()
