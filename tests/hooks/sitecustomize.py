"""Test-only hooks for the worker processes some tests start (``tests.support.hooked`` puts this
directory first on their PYTHONPATH, so Python imports it at start-up). Nothing else loads it.

- ``TTS_TEST_BATCH_DELAY_MS``: every model call also sleeps this long, so the tiny voice behaves
  like a slow model (tasks take time, workers hold them when killed) without loading the CPU.
- ``TTS_TEST_POISON``: a request whose text contains this word kills the worker process
  (``os._exit(137)``) whenever it is synthesized, as a segfault in a native library would.
- ``TTS_TEST_SLOW_LOAD``: ``voice=seconds``: loading that voice's model also sleeps this long,
  as a TensorRT engine build does.
"""

import os
import time

from tts_queue.synthesis import inference, synthesizer

_DELAY_S = float(os.environ.get("TTS_TEST_BATCH_DELAY_MS", "0")) / 1000
_POISON = os.environ.get("TTS_TEST_POISON", "")
_SLOW_VOICE, _, _SLOW_S = os.environ.get("TTS_TEST_SLOW_LOAD", "").partition("=")

if _DELAY_S:
    _run_batch = inference.VoiceModel.run_batch

    def _slow_run_batch(self, ids, scales, speaker_id=None, run_options=None):  # type: ignore[no-untyped-def]
        # a slow model call that, like ONNX Runtime's, stops when its RunOptions say terminate
        until = time.monotonic() + _DELAY_S
        while time.monotonic() < until:
            if run_options is not None and run_options.terminate:
                raise inference.Preempted("stopped by the test hook's RunOptions")
            time.sleep(min(0.005, max(0.0, until - time.monotonic())))
        return _run_batch(self, ids, scales, speaker_id, run_options)

    inference.VoiceModel.run_batch = _slow_run_batch  # type: ignore[method-assign]

if _POISON:
    _synthesize = synthesizer.Synthesizer.synthesize

    def _poisoned(self, request, priority=0, **kwargs):  # type: ignore[no-untyped-def]
        if _POISON in request.text:
            os._exit(137)
        return _synthesize(self, request, priority, **kwargs)

    synthesizer.Synthesizer.synthesize = _poisoned  # type: ignore[method-assign]

if _SLOW_VOICE:
    _load = inference.VoiceModel.load.__func__  # type: ignore[attr-defined]

    def _slow_load(cls, model_path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if model_path.stem == _SLOW_VOICE:
            time.sleep(float(_SLOW_S))
        return _load(cls, model_path, *args, **kwargs)

    inference.VoiceModel.load = classmethod(_slow_load)  # type: ignore[method-assign,assignment]
