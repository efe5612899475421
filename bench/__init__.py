"""Benchmarks for gpu-webhook: load generator, no-op floor server, scaling runs, cost breakdown."""
