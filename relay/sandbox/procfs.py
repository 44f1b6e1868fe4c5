"""Figures of a running process from /proc (Linux), for memory bounds in tests and benchmarks."""

from __future__ import annotations


def status_kib(pid: int | str, field: str) -> int:
    """A ``kB`` line of /proc/PID/status (``VmHWM``: the peak resident set, ``VmRSS``: the current one),
    in KiB; 0 when the process is gone or the line is missing (a zombie has no memory lines)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0
