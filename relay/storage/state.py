"""The relay's state file: who the upstream is and a recent checkpoint, written atomically."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .files import DataDirError, atomic_write

STATE_NAME = "relay-state.json"
STATE_VERSION = 1


@dataclass(frozen=True)
class Checkpoint:
    """A group end known to be durable: (file, position), and where the event ending there starts
    (equal to position when none does, i.e. right after the file's magic)."""

    file: str
    position: int
    last_event_start: int


@dataclass(frozen=True)
class RelayState:
    upstream_server_id: int | None = None
    upstream_version: str | None = None
    checkpoint: Checkpoint | None = None
    # Set at the first switch to another primary: stored files from this one on are the relay's
    # own (named and positioned by the relay), and ingest resumes by GTID, never by file/position.
    own_files_from: str | None = None
    # True only as written by a clean stop (RelayLog.close), and made False again as the relay opens:
    # the checkpoint alone cannot tell, since the one written as a file begins names the very
    # coordinates a power cut rolls that file back to (storage.sync: none).
    stopped_cleanly: bool = False


def read_state(data_dir: Path) -> RelayState:
    path = data_dir / STATE_NAME
    if not path.exists():
        return RelayState()
    try:
        raw = json.loads(path.read_text("utf-8"))
        if raw.get("version") != STATE_VERSION:
            raise DataDirError(f"{path}: unsupported state version {raw.get('version')!r}")
        checkpoint = raw.get("checkpoint")
        return RelayState(raw.get("upstream_server_id"), raw.get("upstream_version"),
                          Checkpoint(**checkpoint) if checkpoint else None, raw.get("own_files_from"),
                          raw.get("stopped_cleanly") is True)
    except (ValueError, TypeError, AttributeError) as exc:
        raise DataDirError(f"{path} is damaged ({exc}); move it away to rebuild it from the binlogs") from None


def write_state(data_dir: Path, state: RelayState) -> None:
    raw = {"version": STATE_VERSION, **asdict(state)}
    atomic_write(data_dir / STATE_NAME, (json.dumps(raw, indent=2) + "\n").encode("utf-8"))
