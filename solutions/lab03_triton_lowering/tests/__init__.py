"""Lab 3's course tests that need its reference: planted mistakes and the benchmark script."""
