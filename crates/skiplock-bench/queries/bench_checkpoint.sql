-- Benchmarks only: a checkpoint before a run's table is filled, so that no checkpoint begins
-- while the run is timed. At default settings a busy cluster checkpoints every 10-15 s
-- (every max_wal_size / (1 + checkpoint_completion_target) of WAL), and a run that a
-- checkpoint's start falls into writes every page it touches again in full to the WAL:
-- with one settled first, every run measures the same state.
CHECKPOINT
