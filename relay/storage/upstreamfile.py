"""The upstream CHANGE MASTER TO chose, kept in data_dir (``upstream.json``, as a replica keeps
master.info), so that a restart follows it: written atomically and durably, readable by the relay's
user alone (0600: it holds the password), removed by RESET SLAVE.

``yaml_upstream`` is a fingerprint of the YAML's upstream when the file was written: the relay
follows the file only while the YAML still says the same (an operator who edits the YAML's upstream
means it; docs in the README, "Runtime control").
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .files import DataDirError, atomic_write, fsync_dir

UPSTREAM_FILE = "upstream.json"
UPSTREAM_FILE_VERSION = 1


@dataclass(frozen=True)
class SavedUpstream:
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    ssl_mode: str
    ssl_ca: str | None
    ssl_cert: str | None
    ssl_key: str | None
    use_gtid: str
    yaml_upstream: str  # the fingerprint of the YAML's upstream it overrides
    changed_at: float  # Unix time of the CHANGE MASTER TO


def read_saved_upstream(data_dir: Path) -> SavedUpstream | None:
    """The saved upstream; None if there is none.  A damaged file stops the relay with its path:
    following the YAML's upstream instead would silently undo an operator's CHANGE MASTER."""
    path = data_dir / UPSTREAM_FILE
    try:
        raw = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise DataDirError(f"{path} is unreadable ({exc}); remove it (RESET SLAVE) to follow the YAML's "
                           "upstream, then CHANGE MASTER TO again") from None
    try:
        if raw.pop("version") != UPSTREAM_FILE_VERSION:
            raise ValueError("unknown version")
        return SavedUpstream(**raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DataDirError(f"{path} is damaged ({exc}); remove it to follow the YAML's upstream") from None


def save_upstream(data_dir: Path, saved: SavedUpstream) -> None:
    raw = {"version": UPSTREAM_FILE_VERSION, **asdict(saved)}
    atomic_write(data_dir / UPSTREAM_FILE, (json.dumps(raw, indent=2) + "\n").encode("utf-8"), mode=0o600)


def forget_upstream(data_dir: Path) -> bool:
    """Remove the saved upstream (durably); False if there was none."""
    try:
        os.unlink(data_dir / UPSTREAM_FILE)
    except FileNotFoundError:
        return False
    fsync_dir(data_dir)
    return True
