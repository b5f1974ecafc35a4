"""Lab 2's course tests that need its reference: planted mistakes and the benchmark script."""
