"""Access: API keys (stored as hashes), who a request is, and the per-key quota of queued work.

Imports only the root modules; the API adapter turns a request's ``Authorization`` header into a
``Principal`` here and scopes every lookup by it.
"""
