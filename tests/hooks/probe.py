"""What a started process sees, as one JSON line: its arguments, working directory, the
``PROBE`` variable, whether the project or prometheus-client was imported before it ran, and its
session; it exits with the code its last argument names (``tests/repo/test_zygote.py``)."""

import json
import os
import sys

if __name__ == "__main__":
    preloaded = sorted(name for name in ("prometheus_client", "tts_queue", "numpy", "celery")
                       if name in sys.modules)
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "probe": os.environ.get("PROBE"),
                      "imported": preloaded, "sid": os.getsid(0), "pid": os.getpid()}))
    sys.exit(int(sys.argv[-1]))
