"""``python -m bench``: list the scenarios, or run one (``bench/README.md``)."""

from __future__ import annotations

from bench.harness.cli import main

raise SystemExit(main())
