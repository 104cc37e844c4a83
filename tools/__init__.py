"""Tools that are not benchmarks: they write shipped data (``calibrate_pace``), read the test suite
(``suite_timeline``) or profile the service (``profile_overhead``, ``profile_worker``). Run from the
repository root as ``python -m tools.NAME``; ``tools/README.md`` says what each does."""
