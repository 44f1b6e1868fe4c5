"""Benchmarks of binlog-relay against the tools it must keep up with (see bench/README.md)."""
