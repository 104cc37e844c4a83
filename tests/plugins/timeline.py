"""Where the suite's wall time goes: each test's start, end, process and CPU, with ``TTS_TEST_TIMELINE``."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """With ``TTS_TEST_TIMELINE`` naming a file, each test's start and end (setup and teardown
    included), its process and the CPU seconds it spent are appended to it: where the suite's wall
    time goes. The CPU counts this process's threads and the children it reaped meanwhile (a
    worker a test started and stopped; one a module shares counts in its last test)."""
    timeline = os.environ.get("TTS_TEST_TIMELINE")
    started, cpu = time.time(), _cpu_seconds()
    yield
    if timeline:
        with open(timeline, "a") as out:
            out.write(f"{started:.3f} {time.time():.3f} {os.environ.get('PYTEST_XDIST_WORKER', 'main')} "
                      f"{_cpu_seconds() - cpu:.2f} {item.nodeid}\n")


def _cpu_seconds() -> float:
    """User and system CPU of this process and of its reaped children."""
    spent = os.times()
    return spent.user + spent.system + spent.children_user + spent.children_system
