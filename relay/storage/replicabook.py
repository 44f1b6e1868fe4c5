"""Which stored file each replica last read, and when: retention spares, for a grace period, the
files a replica that went away will ask for when it comes back (a restart of the replica, a
network cut, or of the relay itself: the book is kept in the data_dir).

Replicas are known by server_id, as a primary knows them; tools dumping as server_id 0 are
one-off readers and not booked.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from .files import atomic_write

log = logging.getLogger(__name__)

BOOK_FILE = "replicas.json"


@dataclass(frozen=True)
class Sighting:
    file: str
    seen_at: float  # Unix time


class ReplicaBook:
    def __init__(self, data_dir: Path, grace: float) -> None:
        self.path = data_dir / BOOK_FILE
        self.grace = grace
        self._sightings: dict[int, Sighting] = {}
        self._saved: dict[int, Sighting] = {}

    def load(self) -> None:
        """Read the book a previous run left; a damaged one is reported and started afresh (it
        only ever protects files, so losing it costs protection, never data)."""
        try:
            entries = json.loads(self.path.read_text())
            self._sightings = {int(server_id): Sighting(str(entry["file"]), float(entry["seen_at"]))
                               for server_id, entry in entries.items()}
        except FileNotFoundError:
            self._sightings = {}
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning("retention: ignoring unreadable %s (%s); replicas seen before this start are not "
                        "protected by replica_grace", self.path, exc)
            self._sightings = {}
        self._saved = dict(self._sightings)

    def seen(self, server_id: int, file: str, now: float) -> None:
        if server_id != 0 and file:
            self._sightings[server_id] = Sighting(file, now)

    def needed(self, now: float) -> set[str]:
        """The files of replicas seen within the grace period."""
        return {s.file for s in self._sightings.values() if now - s.seen_at <= self.grace}

    def to_write(self, now: float) -> bytes | None:
        """The book to write if a replica came, moved to another file or expired (a sighting that
        only got newer is written at most once a grace tenth, which keeps a restart conservative),
        else None; once taken, it counts as written (``write`` undoes that if it fails)."""
        self._sightings = {server_id: s for server_id, s in self._sightings.items() if now - s.seen_at <= self.grace}
        if self._sightings == self._saved:
            return None
        if self._sightings.keys() == self._saved.keys() and all(
                s.file == self._saved[i].file and s.seen_at - self._saved[i].seen_at < self.grace / 10
                for i, s in self._sightings.items()):
            return None
        entries = {str(server_id): {"file": s.file, "seen_at": s.seen_at} for server_id, s in self._sightings.items()}
        self._saved = dict(self._sightings)
        return json.dumps(entries, indent=1, sort_keys=True).encode()

    def write(self, document: bytes) -> None:
        """Blocking (a worker thread may run it): ``document`` made durable as the book."""
        try:
            atomic_write(self.path, document, use_reserve=True)  # written before a purge
        except OSError:
            self._saved = {}  # the next to_write gives the book again
            raise
