"""The errors of the sandbox: not the relay's error kinds (relay/errors.py), because nothing here
is the relay; the callers (the demo, the tests, the benchmarks) report them as they are."""

from __future__ import annotations

from pathlib import Path


class SandboxError(Exception):
    """A throw-away server or relay could not be started, stopped or waited for; the message says why."""


class WaitTimeout(SandboxError, AssertionError):
    """A condition was not met by its deadline.  An AssertionError too, so that a test reports it as
    a failed check rather than as a crash of the harness."""


class ReplicationStopped(SandboxError, AssertionError):
    """A replica's IO or SQL thread stopped while something waited for it to catch up."""


def file_tail(path: Path, offset: int = 0, lines: int = 40) -> str:
    """The last lines of a log written since offset, for error messages."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])
