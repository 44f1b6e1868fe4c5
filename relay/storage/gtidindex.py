"""Where MariaDB GTIDs are in the stored files: each file's GTID_LIST (the state before it)
and the state at the committed end, kept up to date incrementally.  Admin path: it decodes
GTID events, which the ingest and serve paths never do."""

from __future__ import annotations

from dataclasses import dataclass

from ..binlog import events as ev
from ..binlog.gtid import Gtid, format_gtid_position, parse_gtid_position
from .relaylog import RelayLog
from .scan import iter_events


class GtidLookupError(Exception):
    """The requested GTID position cannot be served (text for ERR 1236)."""


@dataclass(frozen=True)
class GtidDumpPlan:
    file: str
    skip_through: dict[int, int]  # domain -> last seq_no the replica already has


class GtidIndex:
    def __init__(self, relay_log: RelayLog) -> None:
        self.relay_log = relay_log
        self._file_start: dict[str, dict[int, Gtid]] = {}
        self._tail: tuple[str, int, dict[int, Gtid]] | None = None  # file, offset scanned, state there

    def file_start_state(self, name: str) -> dict[int, Gtid] | None:
        """The GTID_LIST near the start of ``name``: every domain's last GTID before the file;
        None while the newest file's GTID_LIST is not committed yet (not known, not cached)."""
        if name not in self._file_start:
            state: dict[int, Gtid] | None = None
            with open(self.relay_log.path(name), "rb") as stored:
                for _, event in iter_events(stored, 4, min(self.relay_log.file_end(name), 1 << 20)):
                    if event[4] == ev.GTID_LIST_EVENT:
                        state = {g.domain_id: Gtid(g.domain_id, g.server_id, g.seq_no)
                                 for g in ev.parse_gtid_list(event)}
                        break
                    if event[4] not in (ev.FORMAT_DESCRIPTION_EVENT, ev.START_ENCRYPTION_EVENT):
                        state = {}  # a file without GTID_LIST (not MariaDB's format)
                        break
            if state is None:
                return None
            self._file_start[name] = state
        return dict(self._file_start[name])

    def _state_before(self, name: str) -> dict[int, Gtid]:
        """The state at the start of ``name``, from the file before it while its own GTID_LIST
        is not committed yet (the two are the same)."""
        state = self.file_start_state(name)
        if state is not None:
            return state
        files = self.relay_log.files
        index = files.index(name) if name in files else 0
        if index == 0:
            return {}
        previous = files[index - 1]
        state = self._state_before(previous)
        self._scan(previous, 4, self.relay_log.file_end(previous), state)
        return state

    def current_state(self) -> dict[int, Gtid]:
        """@@gtid_binlog_pos: the last GTID of every domain up to the committed end."""
        committed = self.relay_log.committed
        if committed is None:
            return {}
        name, end = committed
        if self._tail is None or self._tail[0] != name:
            start = self.file_start_state(name)
            if start is None:
                return self._state_before(name)  # nothing of this file is committed yet
            self._tail = (name, 4, start)
        _, scanned, state = self._tail
        state = dict(state)
        scanned = self._scan(name, scanned, end, state)
        self._tail = (name, scanned, state)
        return dict(state)

    def position_at(self, name: str, position: int) -> dict[int, Gtid]:
        """binlog_gtid_pos(file, pos): the state after every group that ends before ``position``."""
        state = self._state_before(name)
        self._scan(name, 4, min(position, self.relay_log.file_end(name)), state)
        return state

    def _scan(self, name: str, start: int, end: int, state: dict[int, Gtid]) -> int:
        offset = start
        with open(self.relay_log.path(name), "rb") as stored:
            for offset, event in iter_events(stored, start, end):
                if event[4] == ev.GTID_EVENT:
                    gtid = ev.parse_mariadb_gtid(event)
                    state[gtid.domain_id] = Gtid(gtid.domain_id, gtid.server_id, gtid.seq_no)
                offset += len(event)
        return max(offset, start)

    def plan_dump(self, requested_text: str, strict: bool) -> GtidDumpPlan:
        """Which file a replica at ``requested_text`` starts in, and which groups it already has."""
        requested = parse_gtid_position(requested_text)
        current = self.current_state()
        for domain, gtid in requested.items():
            have = current.get(domain)
            if have is None or have.seq_no < gtid.seq_no:
                raise GtidLookupError(f"Error: connecting slave requested to start from GTID {gtid}, which is "
                                      "not in the master's binlog")
        files = self.relay_log.files
        for name in reversed(files):
            start = self.file_start_state(name)
            if start is None:
                continue  # the newest file, its GTID_LIST not committed yet: start in the one before
            if all(start_gtid.seq_no <= _seq(requested, domain) for domain, start_gtid in start.items()):
                if strict:
                    self._check_strict(name, requested)
                return GtidDumpPlan(name, {domain: gtid.seq_no for domain, gtid in requested.items()})
        raise GtidLookupError("Could not find GTID state requested by slave in any binlog files. Probably the "
                              "slave state is too old and required binlog files have been purged.")

    def _check_strict(self, first_file: str, requested: dict[int, Gtid]) -> None:
        """In strict mode the exact GTID the replica has must be in the binlog (same server_id)."""
        start = self._state_before(first_file)
        pending = {d: g for d, g in requested.items() if g.seq_no > start.get(d, Gtid(d, 0, 0)).seq_no}
        if not pending:
            return
        for name in self.relay_log.files[self.relay_log.files.index(first_file):]:
            with open(self.relay_log.path(name), "rb") as stored:
                for _, event in iter_events(stored, 4, self.relay_log.file_end(name)):
                    if event[4] != ev.GTID_EVENT:
                        continue
                    seen = ev.parse_mariadb_gtid(event)
                    wanted = pending.get(seen.domain_id)
                    if wanted is not None and seen.seq_no >= wanted.seq_no:
                        if seen.seq_no != wanted.seq_no or seen.server_id != wanted.server_id:
                            raise GtidLookupError(
                                f"Error: connecting slave requested to start from GTID {wanted}, which is not "
                                "in the master's binlog")
                        del pending[seen.domain_id]
                    if not pending:
                        return


def _seq(position: dict[int, Gtid], domain: int) -> int:
    gtid = position.get(domain)
    return gtid.seq_no if gtid else 0


__all__ = ["GtidDumpPlan", "GtidIndex", "GtidLookupError", "format_gtid_position"]
