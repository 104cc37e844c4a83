"""Celery adapter: turns queue messages into calls on the tts_queue core."""
