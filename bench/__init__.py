"""Benchmarks (`make bench`); results go to bench/results.md, which the README quotes."""
