"""Celery entry point: ``celery -A workers.app worker`` (what ``tts-queue worker`` runs)."""

from __future__ import annotations

import os

from tts_queue.settings import Settings
from workers.factory import make_celery

app = make_celery(Settings.from_env(os.environ))
