"""WSGI entry point: ``gunicorn api.wsgi:app`` (what ``tts-queue up`` runs)."""

from __future__ import annotations

from api import create_app

app = create_app()
