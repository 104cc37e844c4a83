"""The long-poll and streaming slots: a long-poll (``?wait=``) or a streamed answer holds an API
thread while it lasts, so at most half the threads hold one at once, shared max-min fairly between
keys (with auth off: client addresses; ``tts_queue.fairness.slots``): no two of them can take every slot,
and none more than ``TTS_KEY_SLOT_SHARE`` of them. A request over its share is answered at once
instead: a poll with its current state and ``Retry-After``, a stream refused (``busy``) or turned
into a task to poll.
"""

from __future__ import annotations

from tts_queue.fairness.slots import FairSlots

SLOTS = "tts.slots"  # app.extensions key of the app's ``Slots``
Slots = FairSlots  # the API's slots are a fair pool like any other
