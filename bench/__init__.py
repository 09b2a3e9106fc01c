"""kbroker benchmarks."""
