"""Which loopback ports a test process gives its servers (relay/sandbox/ports.py use_port_range).

Below the kernel's ephemeral range (32768 and up on Linux), which client sockets take theirs from;
each worker of a parallel run (pytest-xdist, scripts/test.sh) takes its own slice, so two never
pick the same port before a server binds it."""

from __future__ import annotations

TEST_PORTS = (10000, 32767)


def worker_slice(worker: str, workers: int) -> tuple[int, int]:
    """The first and last port of worker ``worker`` ("gw0", "gw1", ...) of ``workers``."""
    first, last = TEST_PORTS
    span = (last - first + 1) // workers
    start = first + int(worker.removeprefix("gw")) * span
    return start, start + span - 1
