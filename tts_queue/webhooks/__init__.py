"""Webhooks: callback rows (a task's or book's URL, state, attempts, lease) and the policy of which
addresses a delivery may reach. The delivery threads live in ``workers/``."""
