"""Benchmark runners: `python -m benchmarks.<name> [--quick] --out FILE.json`."""
