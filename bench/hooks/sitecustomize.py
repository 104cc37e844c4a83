"""Bench-only hook (``bench/bench_overhead.py``'s SQL pass puts this directory first on the
service's PYTHONPATH, so every process imports it at start-up): with ``TTS_BENCH_SQL_DIR`` set,
every SQL statement and transaction the process runs is counted (``bench/sqlcount.py``) and the
counts are written to ``$TTS_BENCH_SQL_DIR/<pid>.json``. Nothing else loads it.
"""

import os
import sys
from pathlib import Path

_DIR = os.environ.get("TTS_BENCH_SQL_DIR")

if _DIR:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from sqlcount import SqlCounter

    _COUNTER = SqlCounter().install()
    _COUNTER.write_every(Path(_DIR), float(os.environ.get("TTS_BENCH_SQL_EVERY_S", "0.1")))
