"""Fixtures of the unit tier that modules in more than one folder use (each defined in ``tests/support/``)."""

from __future__ import annotations

from tests.support.executor import world  # noqa: F401 - a fixture
