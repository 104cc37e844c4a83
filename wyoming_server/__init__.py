"""Wyoming adapter: Home Assistant's text-to-speech protocol served in front of the queue.

``WyomingServer`` (``wyoming_server.listener``) listens on TCP; each connection is a ``Session``
(``wyoming_server.session``) that submits its sentences through the core's task service, as the
HTTP API does, and sends their audio back as the relay reads it. ``python -m wyoming_server``
(what ``tts-queue wyoming`` and ``tts-queue up --wyoming-port`` start) runs it as a process of its
own.
"""
