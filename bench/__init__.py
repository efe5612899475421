"""gpu-webhook's benchmarks: bench/README.md says what each measures, its command and how long it takes."""
