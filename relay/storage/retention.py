"""Which stored binlog files may go (storage.retention, PURGE BINARY LOGS): a pure decision.

Never the active file, never a file a connected replica still reads or will read next, with an
archive never a file not archived yet, and never below ``min_files``; then the oldest first, by
total size and by age.  The policy also spares what a replica seen within ``replica_grace``
still needs (replicabook); an explicit PURGE, like a primary's, spares only what connected
replicas read (and, with an archive, what is not archived yet).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import Refusal
from ..protocol.codes import ER_LOG_IN_USE, ER_UNKNOWN_TARGET_BINLOG
from .files import StoredFile

if TYPE_CHECKING:  # the keeper is handed a relay log; the relay log does not know retention
    from .relaylog import RelayLog


@dataclass(frozen=True)
class RetentionPolicy:
    max_size: int | None
    max_age: float | None
    min_files: int


def purgeable(files: list[StoredFile], in_use_from: int | None, archived: set[str] | None = None
              ) -> list[StoredFile]:
    """The files that may be deleted at all: older than the active file and than any file a
    dump reads (``in_use_from`` is the index of the oldest such file) and, with an archive
    (``archived``: the names archived and verified there), older than the oldest not archived."""
    limit = len(files) - 1
    if in_use_from is not None:
        limit = min(limit, in_use_from)
    if archived is not None:
        limit = min(limit, next((i for i, f in enumerate(files) if f.name not in archived), limit))
    return files[: max(0, limit)]


def files_to_purge(files: list[StoredFile], policy: RetentionPolicy, in_use_from: int | None,
                   now: float, archived: set[str] | None = None) -> list[str]:
    candidates = purgeable(files, in_use_from, archived)
    candidates = candidates[: max(0, len(files) - policy.min_files)]
    total = sum(f.size for f in files)
    chosen = []
    for stored in candidates:
        too_big = policy.max_size is not None and total > policy.max_size
        too_old = policy.max_age is not None and now - stored.modified > policy.max_age
        if not (too_big or too_old):
            break  # oldest first: once one file may stay, every newer one may too
        chosen.append(stored.name)
        total -= stored.size
    return chosen


def files_before(files: list[StoredFile], target: str) -> list[str]:
    """PURGE BINARY LOGS TO 'target': every file older than target."""
    names = [f.name for f in files]
    return names[: names.index(target)]


def files_modified_before(files: list[StoredFile], moment: float) -> list[str]:
    """PURGE BINARY LOGS BEFORE 'moment': the oldest files whose last write is older than it."""
    chosen = []
    for stored in files[:-1]:
        if stored.modified >= moment:
            break
        chosen.append(stored.name)
    return chosen


class PurgeRefused(Refusal):
    """PURGE BINARY LOGS cannot do what was asked (text for the client's ERR)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class RetentionKeeper:
    """Applies the policy and PURGE statements to a relay log, sparing files in use."""

    def __init__(self, relay_log: RelayLog, policy: RetentionPolicy, files_in_use: Callable[[], set[str]],
                 files_for_returning_replicas: Callable[[float], set[str]] = lambda now: set(),
                 archived: Callable[[], set[str]] | None = None) -> None:
        self.relay_log = relay_log
        self.policy = policy
        self.files_in_use = files_in_use
        self.files_for_returning_replicas = files_for_returning_replicas
        self.archived = archived  # with an archive: what is in it, the only files that may go

    def _in_use_from(self, files: list[StoredFile], also: set[str] | None = None) -> int | None:
        in_use = self.files_in_use() | (also or set())
        indexes = [i for i, f in enumerate(files) if f.name in in_use]
        return min(indexes) if indexes else None

    def enforce(self, now: float) -> list[str]:
        if self.policy.max_size is None and self.policy.max_age is None:
            return []
        files = self.relay_log.stored_files()
        in_use_from = self._in_use_from(files, self.files_for_returning_replicas(now))
        archived = self.archived() if self.archived else None
        return self.relay_log.purge(files_to_purge(files, self.policy, in_use_from, now, archived))

    def purge_to(self, target: str) -> list[str]:
        files = self.relay_log.stored_files()
        if target not in [f.name for f in files]:
            raise PurgeRefused(ER_UNKNOWN_TARGET_BINLOG, "Target log not found in binlog index")
        return self._purge_allowed(files, files_before(files, target))

    def purge_before(self, moment: float) -> list[str]:
        files = self.relay_log.stored_files()
        return self._purge_allowed(files, files_modified_before(files, moment))

    def _purge_allowed(self, files: list[StoredFile], wanted: list[str]) -> list[str]:
        archived = self.archived() if self.archived else None
        allowed = {f.name for f in purgeable(files, self._in_use_from(files), archived)}
        chosen = [name for name in wanted if name in allowed]
        if len(chosen) < len(wanted) and not chosen:
            if archived is not None and wanted[0] not in archived:
                raise PurgeRefused(ER_LOG_IN_USE, f"{wanted[0]} is not archived yet, will not purge")
            raise PurgeRefused(ER_LOG_IN_USE, "A purgeable log is in use, will not purge")
        return self.relay_log.purge(chosen)
