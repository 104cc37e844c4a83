"""Synthesis: text to audio bytes, with no database, queue or storage.

The staged pipeline is ``text`` (clean, split, phonemize) -> ``voice`` / ``registry`` (which voice,
loaded how) -> ``engine`` + ``batching`` (which sentences share one ONNX call) -> ``inference``
(the session and exact batch trimming) -> ``synthesizer`` (a request's sentences joined) ->
``audio`` (samples as a value) -> ``encoder`` (every output format). ``request`` validates what a
client asks for and gives its cache key. Nothing here imports ``tasks``, ``storage`` or ``books``.
"""
