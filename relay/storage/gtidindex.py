"""Where MariaDB GTIDs are in the stored files: each file's GTID_LIST (the binlog state before it)
and the state at the committed end, kept up to date incrementally; and where a GTID dump starts,
decided as MariaDB's primary decides it (sql_repl.cc: check_slave_start_position,
gtid_find_binlog_file).  Admin path: it decodes GTID events, which ingest and serving never do."""

from __future__ import annotations

from dataclasses import dataclass

from ..binlog import events as ev
from ..binlog.gtid import BinlogState, Gtid, format_gtid_position, parse_gtid_position, start_missing_message
from ..binlog.gtidstart import GtidStart
from .relaylog import RelayLog
from .scan import iter_events


class GtidLookupError(Exception):
    """The requested GTID position cannot be served (text for ERR 1236)."""


@dataclass(frozen=True)
class GtidDumpPlan:
    file: str  # the dump starts at offset 4 of this file
    start: GtidStart


class GtidIndex:
    def __init__(self, relay_log: RelayLog) -> None:
        self.relay_log = relay_log
        self._file_start: dict[str, BinlogState] = {}
        self._tail: tuple[str, int, BinlogState] | None = None  # file, offset scanned, state there

    def file_start_state(self, name: str) -> BinlogState | None:
        """The GTID_LIST near the start of ``name``: the binlog state before the file; None while
        the newest file's GTID_LIST is not committed yet (not known, not cached)."""
        if name not in self._file_start:
            state: BinlogState | None = None
            with open(self.relay_log.path(name), "rb") as stored:
                for _, event in iter_events(stored, 4, min(self.relay_log.file_end(name), 1 << 20)):
                    if event[4] == ev.GTID_LIST_EVENT:
                        state = BinlogState(Gtid(g.domain_id, g.server_id, g.seq_no) for g in ev.parse_gtid_list(event))
                        break
                    if event[4] not in (ev.FORMAT_DESCRIPTION_EVENT, ev.START_ENCRYPTION_EVENT):
                        state = BinlogState()  # a file without GTID_LIST (not MariaDB's format)
                        break
            if state is None:
                return None
            self._file_start[name] = state
        return self._file_start[name].copy()

    def _state_before(self, name: str) -> BinlogState:
        """The state at the start of ``name``, from the file before it while its own GTID_LIST
        is not committed yet (the two are the same)."""
        state = self.file_start_state(name)
        if state is not None:
            return state
        files = self.relay_log.files
        index = files.index(name) if name in files else 0
        if index == 0:
            return BinlogState()
        previous = files[index - 1]
        state = self._state_before(previous)
        self._scan(previous, 4, self.relay_log.file_end(previous), state)
        return state

    def binlog_state(self) -> BinlogState:
        """Every (domain, server_id)'s last GTID up to the committed end."""
        committed = self.relay_log.committed
        if committed is None:
            return BinlogState()
        name, end = committed
        if self._tail is None or self._tail[0] != name:
            start = self.file_start_state(name)
            if start is None:
                return self._state_before(name)  # nothing of this file is committed yet
            self._tail = (name, 4, start)
        _, scanned, state = self._tail
        scanned = self._scan(name, scanned, end, state)
        self._tail = (name, scanned, state)
        return state.copy()

    def current_state(self) -> dict[int, Gtid]:
        """@@gtid_binlog_pos: the last GTID of every domain up to the committed end."""
        return self.binlog_state().most_recent()

    def position_at(self, name: str, position: int) -> dict[int, Gtid]:
        """binlog_gtid_pos(file, pos): the state after every group that ends before ``position``."""
        state = self._state_before(name)
        self._scan(name, 4, min(position, self.relay_log.file_end(name)), state)
        return state.most_recent()

    def _scan(self, name: str, start: int, end: int, state: BinlogState) -> int:
        offset = start
        with open(self.relay_log.path(name), "rb") as stored:
            for offset, event in iter_events(stored, start, end):
                if event[4] == ev.GTID_EVENT:
                    gtid = ev.parse_mariadb_gtid(event)
                    state.update(Gtid(gtid.domain_id, gtid.server_id, gtid.seq_no))
                offset += len(event)
        return max(offset, start)

    def plan_dump(self, requested: dict[int, Gtid], strict: bool, ignore_duplicates: bool) -> GtidDumpPlan:
        """Where a replica that has ``requested`` (one GTID per domain) starts, and what it skips."""
        state = self.binlog_state()
        pending = dict(requested)
        empty_domains = _check_start(pending, state, ignore_duplicates)
        for name in reversed(self.relay_log.files):
            before = self.file_start_state(name)
            if before is None:
                continue  # the newest file, its GTID_LIST not committed yet: start in the one before
            listed = before.gtid_list()
            if _contains_all(pending, listed):
                for gtid in listed:  # the replica's GTID is the last before this file: nothing to skip
                    if pending.get(gtid.domain_id) == gtid:
                        del pending[gtid.domain_id]
                return GtidDumpPlan(name, GtidStart(pending, empty_domains, strict, self.binlog_state))
        raise GtidLookupError("Could not find GTID state requested by slave in any binlog files. Probably the "
                              "slave state is too old and required binlog files have been purged.")


def _check_start(requested: dict[int, Gtid], state: BinlogState, ignore_duplicates: bool) -> set[int]:
    """check_slave_start_position: every GTID the replica names must be in the binlog state, except
    in a domain the binlog has nothing of (returned: checked again if the domain shows up) and,
    with @slave_gtid_ignore_duplicates, ahead of the domain's end."""
    empty_domains = set()
    for domain, gtid in requested.items():
        have = state.seq_of(domain, gtid.server_id)
        if have is not None and have >= gtid.seq_no:
            continue
        last = state.last(domain)
        if last is None:
            empty_domains.add(domain)
        elif not (ignore_duplicates and last.seq_no < gtid.seq_no):
            raise GtidLookupError(start_missing_message(gtid, state))
    return empty_domains


def _contains_all(requested: dict[int, Gtid], listed: list[Gtid]) -> bool:
    """contains_all_slave_gtid: the file holds every group the replica lacks, i.e. no domain of
    the GTID_LIST before it is missing from the request, and no requested GTID is in an earlier
    file unless it is its domain's very last one there."""
    for index, gtid in enumerate(listed):
        wanted = requested.get(gtid.domain_id)
        if wanted is None:
            return False
        if wanted.server_id == gtid.server_id and wanted.seq_no <= gtid.seq_no:
            if wanted.seq_no < gtid.seq_no:
                return False
            if index + 1 < len(listed) and listed[index + 1].domain_id == gtid.domain_id:
                return False
    return True


__all__ = ["GtidDumpPlan", "GtidIndex", "GtidLookupError", "format_gtid_position", "parse_gtid_position"]
