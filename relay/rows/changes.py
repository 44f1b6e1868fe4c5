"""Change rows from a binlog: transactions in, one row per changed table row out (sans-IO).

    decoder = ChangeDecoder("mysql-bin.000007", partial(iter_events, binlog))
    for offset, event in iter_events(binlog, 4, end):    # whole events, in file order
        for change in decoder.feed(offset, event):
            ...                                          # Change(file, pos, gtid, commit_ts, ...)

    for change in relay.pipeline.read.iter_changes("/data/mysql-bin.000007", start=4, end=None): ...

The transaction envelope (docs/architecture.md, "Change rows"): a change row is emitted
only once the group it belongs to has committed, carrying the group's GTID, the position
of its first event, the commit event's timestamp and its place (``seq``) in the group.

* Groups: a MariaDB GTID event (or a MySQL GTID, or a BEGIN query) opens one; XID,
  ``COMMIT`` or ``XA PREPARE`` commits it; ``ROLLBACK`` (or an INCIDENT event) discards it.
  A MariaDB GTID with the standalone flag, or a MySQL GTID, followed by a query other
  than BEGIN, is a DDL (or other standalone statement): one row with op ``"ddl"``.
* Savepoints: MariaDB writes ``SAVEPOINT x`` and ``ROLLBACK TO x`` into the transaction
  *and keeps the row events in between* (verified on 10.11): the rows written after the
  savepoint are dropped at ``ROLLBACK TO``, as the server dropped them.
* Non-transactional tables (MyISAM, Aria) inside an InnoDB transaction: with row-based
  logging MariaDB 10.11 writes their changes at the end of each statement as a group of
  their own that ends in ``COMMIT`` (the statement cache), before the transaction's group,
  so they are exported even when the InnoDB transaction is rolled back - as they persisted.
* Bounded memory (Drizzle's bulk segments): the events of the open group are kept in memory
  up to ``segment_bytes``; beyond that the decoder lets go of them and remembers only the
  span of the binlog file they lie in, so a transaction of millions of rows never sits in
  memory. When the commit arrives, the decoder asks its caller for that span's events
  again (``reread``: iter_changes reads them from the binlog file, which is append-only,
  and the span lies below the committed end) and picks them out as it did the first time;
  on ROLLBACK there is nothing to clean up. Only one event is decoded at a time. Segments
  are counted in bytes, not rows: a row can hold a 1 GB blob.

Values in ``before``/``after`` are Python values as relay.rows.rows decodes them;
the export turns them into JSON text with its normalisation (relay.pipeline.jsonform).
Statement-based DML inside a transaction (binlog_format=STATEMENT/MIXED) cannot become
rows: such a query becomes one row with op ``"statement"`` and the text in ``query``.
MySQL compressed transactions (TRANSACTION_PAYLOAD events, zstd) are decompressed in
memory and read as if their events stood in the file at the payload's offset. Encrypted
binlogs raise ChangeDecodeError. XA transactions are emitted when XA PREPARE is
logged (a later ``XA ROLLBACK`` of a prepared transaction is not applied).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Iterator
from fnmatch import fnmatchcase
from itertools import chain, count, repeat
from typing import Any, NamedTuple, Never

import zstandard

from ..binlog import events as ev
from ..binlog.groups import MYSQL_GTIDS
from ..errors import InputError
from ..gtid.mysqlgtid import gtid_of_event
from . import coltypes as ct
from .rows import (  # parse_rows_event without building a RowsEvent per event
    ROWS_EVENT_TYPES,
    _all_rows,
    _rows_header,
    uncompress_rows,
)
from .tablemap import RowDecodeError, TableMap, parse_table_map

__all__ = [
    "Change", "ChangeDecoder", "ChangeDecodeError", "GtidRange", "TableFilter",
    "DEFAULT_SEGMENT_BYTES",
]

DEFAULT_SEGMENT_BYTES = 4 << 20
_MARIADB_GTID = struct.Struct("<QIB").unpack_from  # seq_no, domain_id, flags2
_U32 = struct.Struct("<I").unpack_from


class ChangeDecodeError(InputError):
    """A group could not be turned into change rows; the message names file and offset."""


class Change(NamedTuple):
    file: str
    pos: int  # offset of the rows (or query) event in file
    gtid: str | None  # MariaDB 'domain-server-seq' or MySQL 'uuid:gno'; None without GTIDs
    commit_ts: int  # header timestamp (epoch seconds) of the group's commit event
    server_id: int
    database: str | None
    table: str | None
    op: str  # insert | update | delete | ddl | statement
    seq: int  # 0, 1, 2, ... over the changes of the transaction (all tables)
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    query: str | None  # ANNOTATE_ROWS / ROWS_QUERY text, or the statement
    txn_pos: int  # offset of the group's first event (GTID or BEGIN) in file
    table_map: TableMap | None = None  # the columns' types, for the JSON form (relay.pipeline.jsonform)


# --------------------------------------------------------------------------- filters


class GtidRange:
    """Which MariaDB GTIDs are wanted: seq_no > since[domain] and <= until[domain].

    Domains not named in a bound are not limited by it; groups without a MariaDB GTID
    pass. (MariaDB seq_no grow within a domain, so this is the replica's notion of
    "after this position".)"""

    def __init__(self, since: dict[int, int] | None = None, until: dict[int, int] | None = None) -> None:
        self.since = dict(since or {})
        self.until = dict(until or {})

    def __bool__(self) -> bool:
        return bool(self.since or self.until)

    def wants(self, domain: int, seq_no: int) -> bool:
        low = self.since.get(domain)
        if low is not None and seq_no <= low:
            return False
        high = self.until.get(domain)
        return high is None or seq_no <= high

    def __repr__(self) -> str:
        return f"GtidRange(since={self.since}, until={self.until})"


_IDENT = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_$]+)"


class TableFilter:
    """``db.t,db2.*`` (shell-style wildcards, case-sensitive as table names are on Linux).

    Row changes match on their table map's names. A DDL (or statement) row matches when
    its text names a wanted table: the table's name appears as an identifier in the
    statement and the database is the statement's default database or is named in it
    too (``db.*`` needs only the database) - a heuristic, statements are not parsed."""

    def __init__(self, spec: str | Iterable[str] | None) -> None:
        if isinstance(spec, str):
            spec = [s for s in (p.strip() for p in spec.split(",")) if s]
        self.patterns: list[tuple[str, str]] = []
        for item in spec or ():
            db, dot, table = item.partition(".")
            if not dot or not db or not table:
                raise ValueError(f"table filter {item!r}: expected database.table (wildcards allowed)")
            self.patterns.append((_unquote(db), _unquote(table)))
        self._cache: dict[tuple[str | None, str | None], bool] = {}

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def wants_table(self, database: str, table: str) -> bool:
        key = (database, table)
        hit = self._cache.get(key)
        if hit is None:
            hit = any(fnmatchcase(database, d) and fnmatchcase(table, t) for d, t in self.patterns)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def wants_statement(self, database: str | None, query: str) -> bool:
        names = {_unquote(m.group(0)).lower() for m in re.finditer(_IDENT, query)}
        for db, table in self.patterns:
            db_ok = (database is not None and fnmatchcase(database, db)) or any(
                fnmatchcase(n, db.lower()) for n in names)
            if db_ok and (table == "*" or any(fnmatchcase(n, table.lower()) for n in names)):
                return True
        return False


def _unquote(name: str) -> str:
    if len(name) >= 2 and name[0] == name[-1] == "`":
        return name[1:-1].replace("``", "`")
    return name


# --------------------------------------------------------------------------- queries

_SAVEPOINT = re.compile(r"SAVEPOINT\s+(" + _IDENT + r")\s*$", re.I | re.S)
_ROLLBACK_TO = re.compile(r"ROLLBACK\s+(?:WORK\s+)?TO\s+(?:SAVEPOINT\s+)?(" + _IDENT + r")\s*$", re.I | re.S)
_RELEASE = re.compile(r"RELEASE\s+SAVEPOINT\s+(" + _IDENT + r")\s*$", re.I | re.S)
_LEADING_COMMENT = re.compile(r"^(?:\s+|/\*(?!!).*?\*/|#[^\n]*\n|--\s[^\n]*\n)+", re.S)


def _classify(text: str) -> tuple[str, str | None]:
    """BEGIN/COMMIT/ROLLBACK/savepoint control statements vs anything else."""
    head = _LEADING_COMMENT.sub("", text[:512], count=1) if text[:1] in " \t\r\n/#-" else text
    upper = head[:24].upper()
    if upper.startswith("BEGIN") or upper.startswith("XA START") or upper.startswith("XA BEGIN"):
        return "begin", None
    if upper.startswith("COMMIT"):
        return "commit", None
    if upper.startswith("XA COMMIT") or upper.startswith("XA ROLLBACK"):
        return "xa_end_group", None
    if upper.startswith("XA END"):
        return "ignore", None
    if upper.startswith("ROLLBACK"):
        m = _ROLLBACK_TO.match(head)
        if m:
            return "rollback_to", _unquote(m.group(1)).lower()
        return "rollback", None
    if upper.startswith("SAVEPOINT"):
        m = _SAVEPOINT.match(head)
        if m:
            return "savepoint", _unquote(m.group(1)).lower()
    if upper.startswith("RELEASE"):
        m = _RELEASE.match(head)
        if m:
            return "release", _unquote(m.group(1)).lower()
    return "statement", None


# --------------------------------------------------------------------------- groups


class _Group:
    """The open transaction: its envelope, and its events (in memory, or a span of the file)."""

    __slots__ = ("gtid", "txn_pos", "server_id", "skip", "mem", "mem_bytes", "span", "holes",
                 "savepoints", "state", "first_ts")

    def __init__(self, gtid: str | None, txn_pos: int, server_id: int, skip: bool, state: int,
                 first_ts: int) -> None:
        self.gtid = gtid
        self.txn_pos = txn_pos
        self.first_ts = first_ts  # header time of the event at txn_pos (the transactions view)
        self.server_id = server_id
        self.skip = skip
        self.mem: list[tuple[int, Any]] = []  # (offset, event), events as given (bytes or memoryview)
        self.mem_bytes = 0
        # [start, end) of the file holding the group's events that are no longer in memory
        # (all of them come before those in mem); None while everything is in memory.
        self.span: tuple[int, int] | None = None
        # [savepoint, ROLLBACK TO) ranges whose events the server undid: skipped when the
        # span is read again. One per ROLLBACK TO that undid logged events.
        self.holes: list[tuple[int, int]] = []
        self.savepoints: list[tuple[str, int]] = []  # (name, offset of the SAVEPOINT event)
        self.state = state


# Decoder states (like relay.binlog.groups.GroupTracker's)
_OUTSIDE = 0
_AFTER_MYSQL_GTID = 1  # MySQL GTID: BEGIN opens a transaction, any other query is DDL
_IN_TRANSACTION = 2
_STANDALONE = 3  # MariaDB standalone GTID: the next query is the group
_LOOSE = 4  # rows outside any transaction (autocommitted per statement)

_NEUTRAL = frozenset({
    ev.ROTATE_EVENT, ev.STOP_EVENT, ev.HEARTBEAT_LOG_EVENT, ev.HEARTBEAT_LOG_EVENT_V2,
    ev.PREVIOUS_GTIDS_LOG_EVENT, ev.GTID_LIST_EVENT, ev.BINLOG_CHECKPOINT_EVENT, ev.START_EVENT_V3,
    ev.INTVAR_EVENT, ev.RAND_EVENT, ev.USER_VAR_EVENT, ev.IGNORABLE_LOG_EVENT, ev.UNKNOWN_EVENT,
})
_IN_GROUP = ROWS_EVENT_TYPES | {ev.TABLE_MAP_EVENT, ev.ANNOTATE_ROWS_EVENT, ev.ROWS_QUERY_LOG_EVENT}
_BUFFERED = ROWS_EVENT_TYPES | {ev.TABLE_MAP_EVENT, ev.ANNOTATE_ROWS_EVENT, ev.ROWS_QUERY_LOG_EVENT,
                                ev.QUERY_EVENT, ev.QUERY_COMPRESSED_EVENT}


class ChangeDecoder:
    """Feed whole events of one binlog file in order (the FORMAT_DESCRIPTION event first);
    ``feed`` returns the change rows of every group that commits with that event.

    file: the file name put in each Change. gtids/tables: filters (see GtidRange,
    TableFilter); a filtered-out group is skipped without decoding, a filtered-out table's
    rows are decoded (for ``seq``) but not emitted. reread(start, end): the events of
    [start, end) of the file again, as (offset, event), for a group larger than
    ``segment_bytes``, whose events the decoder let go of (relay.pipeline.read.iter_changes
    passes relay.storage.scan.iter_events on the file, which seeks before each read, so it may
    be the stream being fed from).
    """

    def __init__(self, file: str, reread: Callable[[int, int], Iterable[tuple[int, bytes | memoryview]]], *,
                 gtids: GtidRange | None = None, tables: TableFilter | None = None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES, with_ddl: bool = True) -> None:
        self.file = file
        self.reread = reread
        self.gtids = gtids or GtidRange()
        self.tables = tables or TableFilter(None)
        self.segment_bytes = segment_bytes
        self.with_ddl = with_ddl
        self.crc = 0
        self.post_header_len = b""
        self.flavor = "mariadb"
        self._state = _OUTSIDE
        self._group: _Group | None = None
        # GTID seen, group not yet buffered: (gtid, offset, skip, header time of the GTID event)
        self._pending: tuple[str | None, int, bool, int] | None = None
        # While the events of a TRANSACTION_PAYLOAD are fed: where the payload event ends, which
        # is where a group committed inside it ends in the file.
        self._payload_end: int | None = None
        self.reread_groups = 0  # how many groups outgrew memory and were read again (tests, metrics)

    # ------------------------------------------------------------------ events in

    def feed(self, offset: int, event: bytes | memoryview) -> Iterator[Change]:
        """Observe one event; returns an iterator of the changes it commits (often empty).

        Consume (or drop) the returned iterator before feeding the next event."""
        etype = event[4]
        group = self._group
        if etype in _IN_GROUP and group is not None and group.state == _IN_TRANSACTION:
            if not group.skip:  # the hot path: a table map or rows event inside a transaction
                group.mem.append((offset, event))
                group.mem_bytes += len(event)
                if group.mem_bytes > self.segment_bytes:
                    self._let_go(group)
            return NO_CHANGES
        if etype == ev.FORMAT_DESCRIPTION_EVENT:
            fde = ev.parse_format_description(event)
            self.crc = ev.CRC_LEN if fde.checksum_alg == ev.CHECKSUM_CRC32 else 0
            self.post_header_len = fde.post_header_lengths
            self.flavor = "mariadb" if fde.is_mariadb else "mysql"
            self._drop_group()  # a new FDE mid-file: the server restarted, the open group is lost
            self._state = _OUTSIDE
            return NO_CHANGES
        if etype in _NEUTRAL:
            return NO_CHANGES
        if etype == ev.GTID_EVENT:
            seq_no, domain, flags2 = _MARIADB_GTID(event, ev.HEADER_LEN)
            if group is not None or self._pending is not None:
                self._drop_group()
            skip = bool(self.gtids) and not self.gtids.wants(domain, seq_no)
            server_id = _U32(event, 5)[0]
            gtid = f"{domain}-{server_id}-{seq_no}"
            if flags2 & ev.FL_STANDALONE:
                self._state = _STANDALONE
                self._pending = (gtid, offset, skip, _header_time(event))
            else:
                self._state = _IN_TRANSACTION
                self._group = _Group(gtid, offset, server_id, skip, _IN_TRANSACTION, _header_time(event))
            return NO_CHANGES
        if etype in MYSQL_GTIDS:
            self._drop_group()
            self._state = _AFTER_MYSQL_GTID
            self._pending = (_mysql_gtid(event, etype), offset, False, _header_time(event))
            return NO_CHANGES
        if etype == ev.QUERY_EVENT or etype == ev.QUERY_COMPRESSED_EVENT:
            return self._on_query(offset, event, etype)
        if etype == ev.XID_EVENT or etype == ev.XA_PREPARE_LOG_EVENT:
            return self._commit(offset, event)
        if etype == ev.INCIDENT_EVENT:
            self._drop_group()
            self._state = _OUTSIDE
            return NO_CHANGES
        if etype == ev.TRANSACTION_PAYLOAD_EVENT:
            return self._on_payload(offset, event)
        if etype == ev.START_ENCRYPTION_EVENT:
            raise ChangeDecodeError(f"{self.file}:{offset}: encrypted binlogs are not supported")
        if etype in _BUFFERED:
            group = self._group
            if group is None:  # statement parts outside any transaction: autocommit per statement
                pending = self._pending
                self._pending = None
                group = self._group = _Group(pending[0] if pending else None,
                                             pending[1] if pending else offset,
                                             int.from_bytes(event[5:9], "little"),
                                             bool(pending and pending[2]), _LOOSE,
                                             pending[3] if pending else _header_time(event))
                self._state = _LOOSE
            if not group.skip:
                self._buffer(group, offset, event)
            if group.state == _LOOSE and etype in ROWS_EVENT_TYPES and _stmt_end(event, self):
                return self._commit(offset, event)
            return NO_CHANGES
        return NO_CHANGES  # unknown or irrelevant event types

    def _on_payload(self, offset: int, event: bytes | memoryview) -> Iterator[Change]:
        """A MySQL compressed transaction: its events, decompressed, fed in order as if they
        stood in the file at the payload's offset (each change's pos is the payload's)."""
        inner = transaction_payload_events(event[ev.HEADER_LEN:len(event) - self.crc], f"{self.file}:{offset}")
        crc, segment_bytes = self.crc, self.segment_bytes
        # The inner events carry no CRC32; the whole transaction is in memory already and a
        # span of the file could not give its events back, so it is never let go of.
        self.crc, self.segment_bytes = 0, 1 << 62
        self._payload_end = offset + len(event)
        out: list[Change] = []
        try:
            for inner_event in inner:
                out.extend(self.feed(offset, inner_event))  # consumed while crc is 0
        finally:
            self.crc, self.segment_bytes = crc, segment_bytes
            self._payload_end = None
        if self.inside_group:
            raise ChangeDecodeError(f"{self.file}:{offset}: the compressed transaction does not end with its "
                                    "commit (XID or COMMIT)")
        return iter(out)

    def _on_query(self, offset: int, event: bytes | memoryview, etype: int) -> Iterator[Change]:
        q = self._query(event, etype)
        kind, name = _classify(q.query)
        group = self._group
        if group is not None and group.state == _IN_TRANSACTION:
            if kind == "commit" or kind == "xa_end_group":
                return self._commit(offset, event)
            if kind == "rollback":
                self._drop_group()
                self._state = _OUTSIDE
                return NO_CHANGES
            if kind == "savepoint":
                group.savepoints = [(n, pos) for n, pos in group.savepoints if n != name]
                group.savepoints.append((name, offset))  # type: ignore[arg-type]
                return NO_CHANGES
            if kind == "rollback_to":
                _rollback_to(group, name, offset)  # type: ignore[arg-type]
                return NO_CHANGES
            if kind == "release":
                for i, (n, _) in enumerate(group.savepoints):
                    if n == name:
                        del group.savepoints[i:]
                        break
                return NO_CHANGES
            if kind in ("begin", "ignore"):
                return NO_CHANGES
            if not group.skip:
                self._buffer(group, offset, event)  # statement-based DML inside the transaction
            return NO_CHANGES
        if kind == "begin":
            pending = self._pending
            self._pending = None
            self._drop_group()
            self._group = _Group(pending[0] if pending else None, pending[1] if pending else offset,
                                 int.from_bytes(event[5:9], "little"), bool(pending and pending[2]),
                                 _IN_TRANSACTION, pending[3] if pending else _header_time(event))
            self._state = _IN_TRANSACTION
            return NO_CHANGES
        # Anything else outside a transaction is a group of its own: DDL or a lone statement.
        pending = self._pending
        self._pending = None
        loose = self._group
        self._group = None
        self._state = _OUTSIDE
        out: list[Any] = []
        if loose is not None and loose.state == _LOOSE:
            # unterminated loose rows: commit with the query (they end where it starts)
            out.extend(self._replay(loose, offset, event))
        if kind in ("commit", "rollback", "xa_end_group", "savepoint", "rollback_to", "release", "ignore"):
            return iter(out)  # e.g. a lone COMMIT after non-transactional rows, or XA COMMIT 'x'
        skip = bool(pending and pending[2])
        if self.with_ddl and not skip:
            database = q.database or None
            if not self.tables or self.tables.wants_statement(database, q.query):
                out.append(self._standalone(pending, offset, event, database, q.query))
        return iter(out)

    def _standalone(self, pending: tuple[str | None, int, bool, int] | None, offset: int,
                    event: bytes | memoryview, database: str | None, query: str) -> Any:
        """What a standalone statement (DDL) group, the query event at offset, comes out as:
        one change row with op "ddl" (TransactionDecoder makes it a transaction)."""
        return Change(self.file, offset, pending[0] if pending else None, _header_time(event),
                      int.from_bytes(event[5:9], "little"), database, None, "ddl", 0, None, None, query,
                      pending[1] if pending else offset)

    def _query(self, event: bytes | memoryview, etype: int) -> ev.QueryEvent:
        phl = self.post_header_len[ev.QUERY_EVENT - 1] if self.post_header_len else ev.QUERY_POST_HEADER_LEN
        q = ev.parse_query(event, ev.CHECKSUM_CRC32 if self.crc else ev.CHECKSUM_OFF, phl)
        if etype == ev.QUERY_COMPRESSED_EVENT:
            start = ev.query_text_start(event, phl)
            raw = uncompress_rows(bytes(event[start:len(event) - self.crc]))
            q = ev.QueryEvent(q.thread_id, q.exec_time, q.database, q.error_code,
                              raw.decode("utf-8", "replace"))
        return q

    # ------------------------------------------------------------------ the open group

    def _buffer(self, group: _Group, offset: int, event: bytes | memoryview) -> None:
        group.mem.append((offset, event))
        group.mem_bytes += len(event)
        if group.mem_bytes > self.segment_bytes:
            self._let_go(group)

    def _let_go(self, group: _Group) -> None:
        """Drop the in-memory events, widening the group's span of the file over them (the
        events between them that were not buffered are told apart again by _kept)."""
        if group.span is None:
            self.reread_groups += 1
        last_offset, last = group.mem[-1]
        start = group.mem[0][0] if group.span is None else group.span[0]
        group.span = (start, last_offset + len(last))
        group.mem = []
        group.mem_bytes = 0

    def _drop_group(self) -> None:
        self._group = None
        self._pending = None

    def _commit(self, offset: int, event: bytes | memoryview) -> Iterator[Change]:
        group = self._group
        self._group = None
        self._pending = None
        self._state = _OUTSIDE
        if group is None:
            return NO_CHANGES
        if group.skip:
            return NO_CHANGES
        return self._replay(group, self._end_of(offset, event), event)

    def _end_of(self, offset: int, event: bytes | memoryview) -> int:
        """Where the event fed at offset ends in the file: a compressed transaction's events
        are all fed at the payload event's offset, and end with it."""
        return self._payload_end if self._payload_end is not None else offset + len(event)

    # ------------------------------------------------------------------ decoding a committed group

    def _replay(self, group: _Group, end: int, commit_event: bytes | memoryview) -> Iterator[Change]:
        """The group's changes, decoded now that it committed with commit_event, which ends at
        end in the file (this view has no use for end; TransactionDecoder's has)."""
        # Changes come in one list per event, flattened by chain (in C): a generator
        # resumed per change would cost about as much as decoding a small row.
        commit_ts = int.from_bytes(commit_event[0:4], "little")
        records = group.mem if group.span is None else chain(self._reread(group), group.mem)
        return chain.from_iterable(self._batches(group, records, commit_ts))

    def _reread(self, group: _Group) -> Iterator[tuple[int, bytes | memoryview]]:
        """The group's events in its span of the file, read again: those feed buffered."""
        start, end = group.span  # type: ignore[misc]
        holes = iter(group.holes)
        hole = next(holes, None)
        at = start
        for offset, event in self.reread(start, end):
            at = offset + len(event)
            while hole is not None and offset >= hole[1]:
                hole = next(holes, None)
            if hole is not None and offset > hole[0]:
                continue  # undone by ROLLBACK TO
            if self._kept(event):
                yield offset, event
        if at != end:
            raise ChangeDecodeError(f"{self.file}:{at}: the binlog file ends before {end}, where "
                                    "the events of the group being committed do")

    def _kept(self, event: bytes | memoryview) -> bool:
        """Whether feed buffered this event, found between the events of an open group."""
        etype = event[4]
        if etype in _IN_GROUP:
            return True
        if etype == ev.QUERY_EVENT or etype == ev.QUERY_COMPRESSED_EVENT:
            return _classify(self._query(event, etype).query)[0] == "statement"
        return False  # e.g. an INTVAR event before a statement

    def _batches(self, group: _Group, records: Iterable[tuple[int, Any]], commit_ts: int) -> Iterator[list[Change]]:
        """The changes of the group's events, one list per event that has any."""
        file, gtid, txn_pos = self.file, group.gtid, group.txn_pos
        crc = self.crc
        phl = self.post_header_len
        tm_phl = phl[ev.TABLE_MAP_EVENT - 1] if len(phl) >= ev.TABLE_MAP_EVENT else 8
        id_len = 4 if tm_phl == 6 else 6
        flavor = self.flavor
        tables = self.tables if self.tables else None
        maps: dict[int, TableMap] = {}
        wanted: dict[int, bool] = {}
        annotate: str | None = None
        server_id = group.server_id
        seq = 0
        for offset, event in records:
            etype = event[4]
            end = len(event) - crc
            if etype in ROWS_EVENT_TYPES:
                body = event[ev.HEADER_LEN:end]
                table_id = int.from_bytes(body[:id_len], "little")
                tm = maps.get(table_id)
                if tm is None:
                    raise ChangeDecodeError(f"{file}:{offset}: rows event for table id {table_id} "
                                            "without a TABLE_MAP event in its group")
                try:
                    h = _rows_header(etype, bytes(body), tm, phl[etype - 1] if etype <= len(phl) else 10)
                    rows = _all_rows(h, tm)
                except RowDecodeError as e:
                    raise ChangeDecodeError(f"{file}:{offset}: {e}") from e
                if wanted[table_id]:
                    yield _row_changes(rows, h.kind, (file, offset, gtid, commit_ts, server_id, tm.database,
                                                      tm.table, h.kind), seq, (annotate, txn_pos, tm))
                seq += len(rows)
                if h.flags & 1:  # STMT_END_F: the next statement brings its own annotation
                    annotate = None
            elif etype == ev.TABLE_MAP_EVENT:
                try:
                    tm = parse_table_map(event[ev.HEADER_LEN:end], tm_phl, flavor=flavor)  # type: ignore[arg-type]
                except RowDecodeError as e:
                    raise ChangeDecodeError(f"{file}:{offset}: {e}") from e
                maps[tm.table_id] = tm
                wanted[tm.table_id] = tables is None or tables.wants_table(tm.database, tm.table)
            elif etype == ev.ANNOTATE_ROWS_EVENT:
                annotate = bytes(event[ev.HEADER_LEN:end]).decode("utf-8", "replace")
            elif etype == ev.ROWS_QUERY_LOG_EVENT:
                annotate = bytes(event[ev.HEADER_LEN + 1:end]).decode("utf-8", "replace")
            elif etype == ev.QUERY_EVENT or etype == ev.QUERY_COMPRESSED_EVENT:
                q = self._query(event, etype)
                database = q.database or None
                if tables is None or tables.wants_statement(database, q.query):
                    yield [Change(file, offset, gtid, commit_ts, int.from_bytes(event[5:9], "little"),
                                 database, None, "statement", seq, None, None, q.query, txn_pos)]
                seq += 1

    # ------------------------------------------------------------------ end of input

    @property
    def inside_group(self) -> bool:
        return self._group is not None or self._pending is not None

    def close(self) -> None:
        """Drop an unfinished group (input ended before its commit: it is not committed)."""
        self._drop_group()


_new_tuple = tuple.__new__  # builds a Change without NamedTuple's Python-level __new__


def _row_changes(rows: tuple[Any, ...], kind: str, head: tuple[Any, ...], seq: int,
                 tail: tuple[Any, ...]) -> list[Change]:
    """The changes of one rows event. head: the fields before seq; tail: those after the
    images (query, txn_pos, table_map). zip and map build them without running a line
    of Python per row."""
    file, pos, gtid, commit_ts, server_id, database, table, op = head
    query, txn_pos, tm = tail
    if len(rows) == 1:  # most OLTP events: cheaper than setting up the zip
        row = rows[0]
        before, after = (None, row) if kind == "insert" else row if kind == "update" else (row, None)
        return [_new_tuple(Change, (file, pos, gtid, commit_ts, server_id, database, table, op, seq,
                                    before, after, query, txn_pos, tm))]
    r = repeat
    if kind == "insert":
        before, after = r(None), rows
    elif kind == "update":
        before, after = (b for b, _ in rows), (a for _, a in rows)
    else:
        before, after = rows, r(None)
    fields = zip(r(file), r(pos), r(gtid), r(commit_ts), r(server_id), r(database), r(table), r(op),
                 count(seq), before, after, r(query), r(txn_pos), r(tm))
    return list(map(_new_tuple, r(Change), fields))

NO_CHANGES: Iterator[Never] = iter(())  # what feed() returns for an event that completes nothing


def _stmt_end(event: bytes | memoryview, decoder: ChangeDecoder) -> bool:
    phl = decoder.post_header_len
    id_len = 4 if (len(phl) >= ev.TABLE_MAP_EVENT and phl[ev.TABLE_MAP_EVENT - 1] == 6) else 6
    flags_at = ev.HEADER_LEN + id_len
    return bool(event[flags_at] & 1)


def _rollback_to(group: _Group, name: str, offset: int) -> None:
    """ROLLBACK TO name (the event at offset): drop the events logged since the savepoint."""
    for i, (n, _) in enumerate(group.savepoints):
        if n == name:
            at = group.savepoints[i][1]
            del group.savepoints[i + 1:]  # the savepoint itself stays
            break
    else:
        return  # unknown savepoint: the server would have refused it
    keep = len(group.mem)
    while keep and group.mem[keep - 1][0] > at:
        keep -= 1
    undone = keep < len(group.mem) or (group.span is not None and group.span[1] > at)
    if not undone:
        return  # InnoDB alone: the server already cut them out of the binlog
    del group.mem[keep:]
    group.mem_bytes = sum(len(e) for _, e in group.mem)
    # A later span may cover [at, offset) too: remember to skip it. An earlier hole
    # starting after at lies inside this one.
    while group.holes and group.holes[-1][0] >= at:
        group.holes.pop()
    group.holes.append((at, offset))


def _header_time(event: bytes | memoryview) -> int:
    """The event header's timestamp (epoch seconds)."""
    return int.from_bytes(event[0:4], "little")


def _mysql_gtid(event: bytes | memoryview, etype: int) -> str | None:
    """'uuid:gno', or 'uuid:tag:gno' for a tagged GTID (MySQL 8.4+); None when anonymous."""
    gtid = gtid_of_event(event)
    return None if gtid is None else str(gtid)


# --------------------------------------------------------------------------- compressed transactions

# TRANSACTION_PAYLOAD_EVENT (libbinlogevents Transaction_payload_event): header fields as
# (type, length, value) with lenenc type and length and a little-endian value, ended by type 0;
# then the payload: the transaction's events, compressed as a whole.
_PAYLOAD_END, _PAYLOAD_SIZE, _PAYLOAD_COMPRESSION, _PAYLOAD_UNCOMPRESSED_SIZE = 0, 1, 2, 3
_ZSTD, _NONE = 0, 255


def transaction_payload_events(body: bytes | memoryview, where: str) -> list[bytes]:
    """The events of a TRANSACTION_PAYLOAD_EVENT body (after the header, without the CRC32),
    decompressed: whole events, each with its header and without a CRC32."""
    body = bytes(body)
    fields: dict[int, int] = {}
    pos = 0
    try:
        while True:
            ftype, pos = ct.lenenc_at(body, pos)
            if ftype == _PAYLOAD_END:
                break
            length, pos = ct.lenenc_at(body, pos)
            fields[ftype] = int.from_bytes(body[pos:pos + length], "little")
            pos += length
    except (IndexError, ValueError) as exc:
        raise ChangeDecodeError(f"{where}: bad TRANSACTION_PAYLOAD header: {exc}") from None
    payload = body[pos:]
    size = fields.get(_PAYLOAD_SIZE, len(payload))
    if size != len(payload):
        raise ChangeDecodeError(f"{where}: TRANSACTION_PAYLOAD says {size} payload bytes, has {len(payload)}")
    compression = fields.get(_PAYLOAD_COMPRESSION, _NONE)
    expected = fields.get(_PAYLOAD_UNCOMPRESSED_SIZE)
    if compression == _NONE:
        data = payload
    elif compression == _ZSTD:
        if expected is None:
            raise ChangeDecodeError(f"{where}: zstd TRANSACTION_PAYLOAD without its uncompressed size")
        try:
            # max_output_size: MySQL's frames need not say their size, and it bounds a bomb
            data = zstandard.ZstdDecompressor().decompress(payload, max_output_size=expected)
        except zstandard.ZstdError as exc:
            raise ChangeDecodeError(f"{where}: the compressed transaction does not decompress: {exc}") from None
    else:
        raise ChangeDecodeError(f"{where}: unknown TRANSACTION_PAYLOAD compression type {compression}")
    if expected is not None and len(data) != expected:
        raise ChangeDecodeError(f"{where}: the transaction decompresses to {len(data)} bytes, its header says "
                                f"{expected}")
    events = []
    pos = 0
    while pos < len(data):
        if pos + ev.HEADER_LEN > len(data):
            raise ChangeDecodeError(f"{where}: a truncated event at byte {pos} of the decompressed transaction")
        length = int.from_bytes(data[pos + 9:pos + 13], "little")
        if length < ev.HEADER_LEN or pos + length > len(data):
            raise ChangeDecodeError(f"{where}: an event of {length} bytes at byte {pos} of the decompressed "
                                    f"transaction ({len(data)} bytes)")
        events.append(data[pos:pos + length])
        pos += length
    return events
