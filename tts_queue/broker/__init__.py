"""What the service keeps in Redis beside Celery: the connection, key names, the finished signal,
audio streams, the watch of live workers, heartbeats, locks, and the doctor's checks."""
