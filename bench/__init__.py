"""The benchmarks: scenarios registered by subject (``bench/scenarios/``), run by one runner
(``python -m bench list | run SCENARIO``) over shared harness code (``bench/harness/``). How to run
and add one: ``bench/README.md``; what each change measured: ``bench/HISTORY.md``."""
