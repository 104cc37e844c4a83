"""What every scenario shares: the registry, a run's context and its result file, the service and
its processes, the voices, texts and books a scenario reads, statistics, and A/B runs against
another commit through a ``git worktree``."""
