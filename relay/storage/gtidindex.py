"""Where MariaDB GTIDs are in the stored files: each file's GTID_LIST (the binlog state before it)
and the state at the committed end, kept up to date incrementally; and where a GTID dump starts,
decided as MariaDB's primary decides it (sql_repl.cc: check_slave_start_position,
gtid_find_binlog_file).  Admin path: it decodes GTID events, which ingest and serving never do."""

from __future__ import annotations

import struct
from dataclasses import dataclass

import trio

from ..binlog import events as ev
from ..binlog.gtid import BinlogState, Gtid, start_missing_message
from ..binlog.gtidstart import GtidStart
from ..binlog.mysqlgtid import GtidSet, MysqlGtid, gtid_of_event, previous_gtids
from .relaylog import RelayLog
from .scan import event_types, events_of_types, iter_events
from ..errors import Refusal

# catch_up reads this much between turns of the event loop (about 30 ms of walking headers)
CATCH_UP_STEP = 8 << 20
_GTID_ONLY = event_types(ev.GTID_EVENT)
_MYSQL_GTIDS = event_types(ev.GTID_LOG_EVENT, ev.GTID_TAGGED_LOG_EVENT)
_GTID_SEQ_DOMAIN = struct.Struct("<QI")  # the GTID event body starts with seq_no, domain_id
_SERVER_ID = struct.Struct("<I")


class GtidLookupError(Refusal):
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
        if not self._tail_at(committed[0]):
            return self._state_before(committed[0])  # nothing of this file is committed yet
        self._read_tail(committed[1], budget=None)
        return self._tail[2].copy()  # type: ignore[index]

    async def catch_up(self) -> None:
        """Read the committed GTIDs of the newest file not read yet, a few megabytes at a time,
        giving the event loop back in between: the GTID request that follows reads the rest in
        the loop, and a gigabyte file no longer holds every other client for seconds."""
        while (committed := self.relay_log.committed) is not None and self._tail_at(committed[0]):
            read_up_to = self._tail[1]  # type: ignore[index]
            if read_up_to >= committed[1]:
                return
            self._read_tail(committed[1], budget=CATCH_UP_STEP)
            if self._tail[1] == read_up_to:  # type: ignore[index]
                return  # a damaged event stops the walk: the dump's own reads report it
            await trio.lowlevel.checkpoint()

    def _tail_at(self, name: str) -> bool:
        """The tail is the newest file's (set up from its GTID_LIST); False while that is not committed."""
        if self._tail is None or self._tail[0] != name:
            start = self.file_start_state(name)
            if start is None:
                return False
            self._tail = (name, 4, start)
        return True

    def _read_tail(self, end: int, budget: int | None) -> None:
        name, scanned, state = self._tail  # type: ignore[misc]
        self._tail = (name, self._scan(name, scanned, end, state, budget), state)

    def current_state(self) -> dict[int, Gtid]:
        """@@gtid_binlog_pos: the last GTID of every domain up to the committed end."""
        return self.binlog_state().most_recent()

    def position_at(self, name: str, position: int) -> dict[int, Gtid]:
        """binlog_gtid_pos(file, pos): the state after every group that ends before ``position``."""
        state = self._state_before(name)
        self._scan(name, 4, min(position, self.relay_log.file_end(name)), state)
        return state.most_recent()

    def _scan(self, name: str, start: int, end: int, state: BinlogState, budget: int | None = None) -> int:
        """Add the GTIDs of [start, end) of ``name`` to ``state`` (about ``budget`` bytes of it,
        when given); returns where the whole events read end.  Headers only (events_of_types)."""
        with open(self.relay_log.path(name), "rb") as stored:
            gtid_events, walked = events_of_types(stored, start, end, _GTID_ONLY, budget)
        for _, event in gtid_events:
            seq_no, domain_id = _GTID_SEQ_DOMAIN.unpack_from(event, ev.HEADER_LEN)
            state.update(Gtid(domain_id, _SERVER_ID.unpack_from(event, 5)[0], seq_no))
        return walked

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




# ------------------------------------------------------------------ MySQL

ER_SOURCE_HAS_PURGED_REQUIRED_GTIDS = (
    "Cannot replicate because the source purged required binary logs. Replicate the missing transactions from "
    "elsewhere, or provision a new replica from backup. Consider increasing the source's binary log expiration "
    "period. The GTID set sent by the replica is '{sent}', and the missing transactions are '{missing}'.")
ER_REPLICA_HAS_MORE_GTIDS_THAN_SOURCE = (
    "Cannot replicate because the source has not committed some transactions the replica has: the replica has "
    "more GTIDs than the source has, using the source's SERVER_UUID. This may indicate that the end of the "
    "binary log was truncated or that the last binary log file was lost, e.g., after a power or disk failure "
    "when sync_binlog != 1. The source may or may not have rolled back transactions that were already "
    "replicated to the replica. Suggest to replicate any transactions that source has rolled back from "
    "replica to source, and/or commit empty transactions on source to account for transactions that have "
    "been committed on source but are not included in GTID_EXECUTED.")


class MysqlGtidIndex:
    """A MySQL-flavoured history's GTIDs: each stored file's PREVIOUS_GTIDS (every GTID before the
    file), and the set at the committed end (gtid_executed)."""

    def __init__(self, relay_log: RelayLog) -> None:
        self.relay_log = relay_log
        self._previous: dict[str, GtidSet] = {}
        self._tail: tuple[str, int, GtidSet, MysqlGtid | None] | None = None  # file, scanned, set, last GTID

    def previous(self, name: str) -> GtidSet | None:
        """The PREVIOUS_GTIDS of ``name`` (empty for a file without one); None while not stored yet."""
        if name not in self._previous:
            with open(self.relay_log.path(name), "rb") as stored:
                events = [event for _, event in iter_events(stored, 4, min(self.relay_log.file_end(name), 1 << 20))]
            if len(events) < 2:
                return None
            alg = ev.parse_format_description(events[0]).checksum_alg
            found = next((e for e in events[1:3] if e[4] == ev.PREVIOUS_GTIDS_LOG_EVENT), None)
            self._previous[name] = previous_gtids(found, alg) if found is not None else GtidSet()
        return self._previous[name].copy()

    def purged(self) -> GtidSet:
        """gtid_purged: what the oldest stored file's PREVIOUS_GTIDS says came before it."""
        files = self.relay_log.files
        return (self.previous(files[0]) if files else None) or GtidSet()

    def executed(self) -> GtidSet:
        """gtid_executed: everything up to the committed end."""
        self._scan_tail()
        return self._tail[2].copy() if self._tail else GtidSet()

    def newest_source(self) -> MysqlGtid | None:
        """The last GTID stored: its UUID stands for the source's server_uuid."""
        self._scan_tail()
        return self._tail[3] if self._tail else None

    def _scan_tail(self) -> None:
        committed = self.relay_log.committed
        if committed is None:
            return
        name, end = committed
        if self._tail is None or self._tail[0] != name:
            start = self.previous(name)
            if start is None:
                return
            last = self._tail[3] if self._tail else None
            self._tail = (name, 4, start, last)
        _, scanned, state, last = self._tail
        with open(self.relay_log.path(name), "rb") as stored:
            gtid_events, walked = events_of_types(stored, scanned, end, _MYSQL_GTIDS)
        for _, event in gtid_events:
            gtid = gtid_of_event(event)
            if gtid is not None:
                state.add(gtid)
                last = gtid
        self._tail = (name, walked, state, last)

    def plan_dump(self, replica_has: GtidSet) -> str:
        """COM_BINLOG_DUMP_GTID (rpl_binlog_sender.cc, find_first_log_not_in_gtid_set): refuse a
        replica that lacks purged transactions or has the source's transactions the history does
        not; else the newest file whose PREVIOUS_GTIDS the replica has entirely."""
        missing = self.purged().minus(replica_has)
        if missing:
            raise GtidLookupError(ER_SOURCE_HAS_PURGED_REQUIRED_GTIDS.format(
                sent=_one_line(replica_has), missing=_one_line(missing)))
        source = self.newest_source()
        if source is not None and replica_has.only(source.tsid.uuid).minus(self.executed()):
            raise GtidLookupError(ER_REPLICA_HAS_MORE_GTIDS_THAN_SOURCE)
        for name in reversed(self.relay_log.files):
            before = self.previous(name)
            if before is not None and before.issubset(replica_has):
                return name
        raise GtidLookupError(ER_SOURCE_HAS_PURGED_REQUIRED_GTIDS.format(
            sent=_one_line(replica_has), missing=_one_line(self.purged())))


def _one_line(gtids: GtidSet) -> str:
    return str(gtids).replace("\n", "")
