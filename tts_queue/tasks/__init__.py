"""Tasks: a synthesis request's life as a database row, on a queue, in a worker.

``keys`` names every queue, task and Redis key; ``rows`` is the one owner of a row's status;
``service`` submits, reads and cancels (the API's core); ``executor`` runs a task in a worker;
``recovery`` re-sends what a dead worker or a broker restart lost; ``heartbeat`` and ``finish``
are the Redis signals of live workers and finished tasks. Imports synthesis and storage, never
books.
"""
