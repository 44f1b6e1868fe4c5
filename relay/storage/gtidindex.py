"""Where GTIDs are in the stored files, read from the index of the stored history (history.py):
each file's GTID_LIST (the binlog state before it), the state at any clean point (the GTID_LIST
and the file's spans), and where a GTID dump starts, decided as MariaDB's primary decides it
(sql_repl.cc: check_slave_start_position, gtid_find_binlog_file).  Admin path: it decodes GTID
events, which ingest and serving never do."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..binlog import events as ev
from ..errors import Refusal
from ..gtid.gtid import BinlogState, Gtid, start_missing_message
from ..gtid.mysqlgtid import GtidSet, MysqlGtid, gtid_of_event, previous_gtids
from ..gtid.spans import Span, apply_span
from ..replication.gtidstart import GtidStart
from .history import HistoryIndex
from .relaylog import RelayLog
from .scan import event_types, events_of_types, iter_events

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
        self.history: HistoryIndex = relay_log.history
        self._file_start: dict[str, BinlogState] = {}
        # per file: how many of its index's spans are folded into a state, the state, the last span folded
        self._folded: dict[str, tuple[int, BinlogState, Span]] = {}

    def file_start_state(self, name: str) -> BinlogState | None:
        """The GTID_LIST near the start of ``name``: the binlog state before the file; None while
        the newest file's GTID_LIST is not committed yet (not known, not cached)."""
        if name not in self._file_start and self.relay_log.archived_only(name):
            listed = self.relay_log.shelf.start_state(name)  # type: ignore[union-attr]
            if listed is None:
                return None  # not read from the archive yet: a GTID dump cannot start in it yet
            self._file_start[name] = BinlogState(Gtid(*map(int, text.split("-"))) for text in listed)
        if name not in self._file_start:
            state: BinlogState | None = None
            with open(self.relay_log.path(name), "rb") as stored:
                for _, event in iter_events(stored, 4, min(self.relay_log.file_end(name), 1 << 16), 1 << 16):
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
        return self.state_at_span_end(previous, self.history.spans(previous))

    def state_at_span_end(self, name: str, spans: list[Span]) -> BinlogState:
        """The binlog state where ``spans`` (the first spans of ``name``, from offset 4) end."""
        known = self.history.file_spans(name).spans
        shared = 0
        while shared < len(spans) and shared < len(known) and spans[shared] is known[shared]:
            shared += 1
        # The index's own spans are folded once and kept (per file); anything past them is added to a copy.
        count, folded, last = self._folded.get(name, (0, None, None))
        if folded is None or (count and (count > len(known) or known[count - 1] is not last)):
            count, folded = 0, self._state_before(name)
        if count > shared:  # an earlier point than the one kept: fold a copy from the start
            count, folded = 0, self._state_before(name)
        else:
            while count < shared:
                apply_span(folded, known[count])
                count += 1
            if count:
                if len(self._folded) > len(self.relay_log.files) + 8:  # purged files
                    self._folded = {n: v for n, v in self._folded.items() if n in self.relay_log.files}
                self._folded[name] = (count, folded, known[count - 1])
        state = folded.copy()
        for span in spans[count:]:
            apply_span(state, span)
        return state

    def binlog_state(self) -> BinlogState:
        """Every (domain, server_id)'s last GTID up to the committed end."""
        committed = self.relay_log.committed
        if committed is None:
            return BinlogState()
        name = committed[0]
        if self.file_start_state(name) is None:
            return self._state_before(name)  # nothing of this file is committed yet
        return self.state_at_span_end(name, self.history.spans(name))

    def current_state(self) -> dict[int, Gtid]:
        """@@gtid_binlog_pos: the last GTID of every domain up to the committed end."""
        return self.binlog_state().most_recent()

    def position_at(self, name: str, position: int) -> dict[int, Gtid]:
        """binlog_gtid_pos(file, pos): the state after every GTID event that starts before
        ``position`` (the index's spans up to there, then the GTID events of what is left)."""
        position = min(position, self.relay_log.file_end(name))
        spans = [span for span in self.history.spans(name) if span.end <= position]
        state = self.state_at_span_end(name, spans)
        self._scan(name, spans[-1].end if spans else 4, position, state)
        return state.most_recent()

    def _scan(self, name: str, start: int, end: int, state: BinlogState) -> None:
        """Add the GTIDs of [start, end) of ``name`` to ``state``.  Headers only (events_of_types)."""
        with open(self.relay_log.source_path(name), "rb") as stored:
            gtid_events, _ = events_of_types(stored, start, end, _GTID_ONLY)
        for _, event in gtid_events:
            seq_no, domain_id = _GTID_SEQ_DOMAIN.unpack_from(event, ev.HEADER_LEN)
            state.update(Gtid(domain_id, _SERVER_ID.unpack_from(event, 5)[0], seq_no))

    def plan_dump(self, requested: dict[int, Gtid], strict: bool, ignore_duplicates: bool) -> GtidDumpPlan:
        """Where a replica that has ``requested`` (one GTID per domain) starts, and what it skips."""
        state = self.binlog_state()
        pending = dict(requested)
        empty_domains = _check_start(pending, state, ignore_duplicates)
        for name in reversed(self.relay_log.served_files()):  # with an archive, its files too
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
    """A MySQL-flavoured history's GTIDs: each file's PREVIOUS_GTIDS (every GTID before the file;
    an archived file's as its archive entry keeps it), and the set at the committed end
    (gtid_executed)."""

    def __init__(self, relay_log: RelayLog) -> None:
        self.relay_log = relay_log
        self._previous: dict[str, GtidSet] = {}

    def previous(self, name: str) -> GtidSet | None:
        """The PREVIOUS_GTIDS of ``name`` (empty for a file without one); None while not stored yet."""
        if name not in self._previous and self.relay_log.archived_only(name):
            listed = self.relay_log.shelf.previous_gtids(name)  # type: ignore[union-attr]
            if listed is None:
                return None  # not read from the archive yet: a GTID dump cannot start in it yet
            self._previous[name] = GtidSet.parse(listed) if listed else GtidSet()
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
        """gtid_purged: what the oldest file served (stored, or archived) says came before it."""
        files = self.relay_log.served_files()
        return (self.previous(files[0]) if files else None) or GtidSet()

    def executed(self) -> GtidSet:
        """gtid_executed: everything up to the committed end (the newest file's PREVIOUS_GTIDS and
        the GTIDs of its spans)."""
        committed = self.relay_log.committed
        executed = (self.previous(committed[0]) if committed else None) or GtidSet()
        if committed is not None:
            for span in self.relay_log.history.spans(committed[0]):
                if span.mysql is not None:
                    executed.update(span.mysql)
        return executed

    def newest_source(self) -> MysqlGtid | None:
        """The last GTID stored: its UUID stands for the source's server_uuid."""
        for name in reversed(self.relay_log.files):
            for span in reversed(self.relay_log.history.spans(name)):
                if span.mysql is not None:
                    with open(self.relay_log.path(name), "rb") as stored:
                        gtid_events, _ = events_of_types(stored, span.start, span.end, _MYSQL_GTIDS)
                    return gtid_of_event(gtid_events[-1][1])
        return None

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
        for name in reversed(self.relay_log.served_files()):  # with an archive, its files too
            before = self.previous(name)
            if before is not None and before.issubset(replica_has):
                return name
        raise GtidLookupError(ER_SOURCE_HAS_PURGED_REQUIRED_GTIDS.format(
            sent=_one_line(replica_has), missing=_one_line(self.purged())))


def _one_line(gtids: GtidSet) -> str:
    return str(gtids).replace("\n", "")
