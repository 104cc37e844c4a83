"""The audio estimate: how long a request's audio will be (``duration``, at each voice's ``pace``),
what it will cost a worker (``work``) and what will be said, counted without the model (``spoken``)."""
