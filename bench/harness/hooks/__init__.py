"""Modules a service's processes load at start-up when a run puts this folder first on their
``PYTHONPATH`` (``bench.harness.stack.Up`` with ``sql_dir``)."""
