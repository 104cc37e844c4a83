"""Alembic migrations; ``tts-queue migrate`` applies them (see ``tts_queue/migrate.py``)."""
