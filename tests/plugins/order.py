"""The longest test modules first, so pytest-xdist's processes start them at once."""

from __future__ import annotations

import pytest

# The modules that take longest (a real-model graph, several service stacks, restarts), run first:
# pytest-xdist (``--no-loadscope-reorder``) hands modules to its processes in collection order, so
# the long ones start at once and the short ones fill in around them instead of one long module
# running alone at the end. The first process gets the first and the fifth module at once (it
# holds fewer than three tests): the fifth runs after the first, which mostly waits (on a webhook
# receiver), so it is one of the long ones.
LONGEST_FIRST = (
    "tests/service/test_webhook_trickle.py", "tests/repo/test_bench.py", "tests/real/test_real_kokoro.py",
    "tests/service/test_fair_time.py", "tests/service/test_up.py", "tests/service/test_languages.py",
    "tests/real/test_real_estimate.py",
    "tests/real/test_real_kokoro_languages.py",
    "tests/service/test_faults_services.py",
    "tests/service/test_faults_workers.py", "tests/service/test_bounds.py",
    "tests/service/test_webhooks.py", "tests/service/test_observability.py", "tests/service/test_books.py",
    "tests/unit/books/test_book_fuzz.py",
    "tests/unit/books/test_book_assembly.py", "tests/service/test_full_disk.py",
    "tests/service/test_edges.py",
    "tests/service/test_contract_fuzz.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest modules first (``LONGEST_FIRST``), every other in its usual order after them."""
    rank = {path: n for n, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # the module's path
