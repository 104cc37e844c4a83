"""The stack with none of tts-queue in it, for the ``floor`` scenario: a bare Flask app and a bare
Celery app configured as the service's own (``workers.dispatch.celery_config`` and the worker's pool
settings), each doing the least a request of the service does.

- Flask (``app``): ``POST /v1/tts`` parses the JSON body and answers a small JSON document (what a
  cache hit answers, without the lookup); ``GET /v1/tasks/<id>`` answers one.
- Celery (``celery``): ``floor.noop(id)`` pushes its id on a Redis list (the shape of the service's
  finished signal); the client sends it and waits on that list, as the API's long-poll waits.

The broker is ``FLOOR_REDIS_URL`` (a unix-socket URL of a private server the scenario starts)."""

from __future__ import annotations

import os
import uuid

import redis
from celery import Celery
from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue

from tts_queue.broker.connection import client_url, kombu_url
from tts_queue.settings import Settings
from workers.dispatch import celery_config

REDIS_URL = os.environ.get("FLOOR_REDIS_URL", "unix:///tmp/floor-redis.sock")
QUEUE = "floor"
DONE_LIST = "floor:done:"

app = Flask(__name__)


@app.post("/v1/tts")
def submit() -> ResponseReturnValue:
    """A submission answered at once."""
    body = request.get_json()
    task_id = str(uuid.uuid4())
    return jsonify({"task_id": task_id, "status": "done", "text_chars": len(body.get("text", "")),
                    "status_url": f"/v1/tasks/{task_id}", "audio_url": f"/v1/tasks/{task_id}/audio"})


@app.get("/v1/tasks/<task_id>")
def status(task_id: str) -> ResponseReturnValue:
    """A status read answered at once."""
    return jsonify({"task_id": task_id, "status": "done", "status_url": f"/v1/tasks/{task_id}"})


celery = Celery("floor", broker=kombu_url(REDIS_URL))
celery.conf.update(celery_config(Settings.from_env({"TTS_REDIS_URL": REDIS_URL})))
celery.conf.update(worker_prefetch_multiplier=1, worker_pool="threads", task_default_queue=QUEUE)
_signals = redis.Redis.from_url(client_url(REDIS_URL))


@celery.task(name="floor.noop")
def noop(task_id: str) -> None:
    """The least a synthesis task does around its work: tell the waiter it ended."""
    pipe = _signals.pipeline()
    pipe.lpush(DONE_LIST + task_id, "done")
    pipe.expire(DONE_LIST + task_id, 60)
    pipe.execute()
