"""Fixtures of the adapter tier: the Flask app over the real core (SQLite, the tiny voice) with the
fake queue (``tests.support.FakeQueue``) as its dispatcher and its watch; Celery task bodies are
called directly. No worker process, no gunicorn."""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from api import create_app
from api.services import Services
from tests.support import FakeQueue


@pytest.fixture()
def queue() -> FakeQueue:
    """The fake queue: records what is sent, one live worker per pool."""
    return FakeQueue()


@pytest.fixture()
def client(services: Services) -> FlaskClient:
    """A test client of the app over ``services`` (each module says which settings)."""
    return create_app(services.settings, services).test_client()
