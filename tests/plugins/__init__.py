"""The suite's pytest hooks, one plugin a module, listed in ``tests/conftest.py``'s ``pytest_plugins``."""
