"""What the index of the stored history records about a stretch of a binlog file, sans-IO.

A file's index is a list of *spans* that cover it from offset 4, each ending at a *clean*
point: right after a group ends or after an event that belongs to no group.  A span tells,
for the groups that end inside it, which GTIDs they carry (MariaDB: per domain and server_id,
how many, the lowest, highest and last seq_no, in the order they first appear; MySQL: the
set), their first and commit timestamps, and where the events outside any group are.  A
MariaDB GTID dump that skips what its replica already has can jump over a span whose groups
it would all skip, sending only those loose events (gtidstart.GtidStart.seek); the binlog
state at any clean point is the file's GTID_LIST plus its spans (``apply_span``).

What is a group and what is loose follows MariaDB's dump (gtidstart): a MariaDB GTID event
opens a group that a standalone statement, or XID / XA PREPARE / COMMIT / ROLLBACK, closes.
A MySQL GTID or anonymous GTID opens a group that XID, a DDL statement, COMMIT or a
compressed transaction closes.  ``SpanWalker`` is told every event in file order; ingest
gives it the events it stores, and a file is walked block by block when its index must be
built from the file.  The walking is in C (``_scan.span_walk``) when the module is built:
ingest must not slow down for it; ``PySpanWalker`` is the same walk in Python, the fallback
and the tests' reference.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

from ..binlog import events as ev
from .gtid import BinlogState, Gtid
from .mysqlgtid import GtidSet, gtid_of_event

try:
    from ..binlog import _scan as _compiled
except ImportError:  # built without a C compiler: PySpanWalker does the same, slower
    _compiled = None

LOOSE_MAX = 64  # loose events remembered per span; a span with more is a barrier to seeks

_NONE, _STANDALONE, _TRANSACTION, _MYSQL_GROUP, _MYSQL_TRANSACTION = range(5)
_KIND_MARIADB, _KIND_MYSQL, _KIND_ANONYMOUS = 1, 2, 3
# Log_event::is_part_of_group: a standalone MariaDB group ends at its first event not listed here.
PART_OF_GROUP = frozenset({ev.GTID_EVENT, ev.INTVAR_EVENT, ev.RAND_EVENT, ev.USER_VAR_EVENT,
                           ev.TABLE_MAP_EVENT, ev.ANNOTATE_ROWS_EVENT})
_MYSQL_GTIDS = (ev.GTID_LOG_EVENT, ev.GTID_TAGGED_LOG_EVENT)
_MYSQL_OPENERS = (b"BEGIN", b"XA START", b"XA BEGIN")
_MYSQL_ENDERS = (b"COMMIT", b"ROLLBACK", b"XA COMMIT", b"XA ROLLBACK")
_GTID_BODY = struct.Struct("<QIB")  # seq_no, domain_id, flags2
_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class SpanPair:
    """The groups of one (domain, server_id) that end in a span."""

    domain: int
    server: int
    count: int
    lo: int  # lowest seq_no
    hi: int  # highest seq_no
    last: int  # seq_no of the last one
    last_ordinal: int  # the last one is the span's last_ordinal-th group (1-based): orders domains' last GTIDs


@dataclass(frozen=True)
class Span:
    """[start, end) of a file, both clean points."""

    start: int
    end: int
    last_event_at: int  # start of the event that ends at ``end`` (-1 when the span is empty)
    groups: int  # groups that end in the span (GTID or anonymous)
    anonymous: int  # of which MySQL anonymous groups (no GTID)
    first_ts: int | None  # header time of the first group's GTID event
    commit_lo: int | None  # lowest and highest header time of the groups' commit events
    commit_hi: int | None
    last_commit_ts: int | None
    last_commit_at: int | None  # offset of the last group's commit event
    last_gtid_at: int | None  # offset of the last group's GTID event
    pairs: tuple[SpanPair, ...]  # MariaDB
    loose: tuple[int, ...]  # offsets of the events outside any group
    barrier: bool  # more loose events than remembered: a GTID dump must walk the span
    mysql: GtidSet | None = None  # MySQL GTIDs of the groups (None: none)

    @property
    def last_gtid(self) -> Gtid | None:
        """The MariaDB GTID of the span's last group, if it has one."""
        if not self.pairs:
            return None
        last = max(self.pairs, key=lambda pair: pair.last_ordinal)
        return Gtid(last.domain, last.server, last.last)

    def domains(self) -> set[int]:
        return {pair.domain for pair in self.pairs}


def span_holding(position: int, spans: Sequence[Span]) -> int | None:
    """The index of the span ``position`` is in (or starts)."""
    first = bisect.bisect_right([span.end for span in spans], position)
    return first if first < len(spans) and spans[first].start <= position else None


def excluded_until(replica_has: GtidSet, position: int, spans: Sequence[Span]) -> int | None:
    """A MySQL GTID dump (mysqlgtid.ExcludedGroups) at ``position``: the end of the last of the
    spans, from the one holding it, whose groups all have a GTID the replica has and that hold
    no event past the position outside a group (which it would be sent); None if there is none."""
    first = span_holding(position, spans)
    if first is None:
        return None
    last = first
    while last < len(spans):
        span = spans[last]
        if (span.barrier or span.anonymous or span.pairs or span.mysql is None
                or not span.mysql.issubset(replica_has) or any(at >= position for at in span.loose)):
            break
        last += 1
    return spans[last - 1].end if last > first else None


def apply_span(state: BinlogState, span: Span) -> None:
    """Add the span's GTIDs to ``state`` exactly as adding them one by one in file order would:
    new domains and servers are inserted in the order they first appear (MariaDB's hash order
    depends on it), each (domain, server) keeps its last seq_no, each domain its last GTID."""
    last_of: dict[int, SpanPair] = {}
    for pair in span.pairs:
        state.update(Gtid(pair.domain, pair.server, pair.last))
        known = last_of.get(pair.domain)
        if known is None or pair.last_ordinal > known.last_ordinal:
            last_of[pair.domain] = pair
    for pair in last_of.values():
        state.update(Gtid(pair.domain, pair.server, pair.last))


def merge_spans(spans: Sequence[Span]) -> Span:
    """One span for consecutive ``spans``: what one walk of the whole stretch finds."""
    pairs: dict[tuple[int, int], list[int]] = {}
    ordinal = 0
    mysql: GtidSet | None = None
    loose: list[int] = []
    for span in spans:
        for pair in span.pairs:
            known = pairs.get((pair.domain, pair.server))
            if known is None:
                pairs[(pair.domain, pair.server)] = [pair.count, pair.lo, pair.hi, pair.last,
                                                     ordinal + pair.last_ordinal]
            else:
                known[0] += pair.count
                known[1], known[2] = min(known[1], pair.lo), max(known[2], pair.hi)
                known[3], known[4] = pair.last, ordinal + pair.last_ordinal
        ordinal += span.groups
        if span.mysql is not None:
            mysql = mysql or GtidSet()
            mysql.update(span.mysql)
        loose += span.loose
    timed = [span for span in spans if span.first_ts is not None]
    grouped = [span for span in spans if span.groups]
    walked = [span for span in spans if span.last_event_at >= 0]
    return Span(
        spans[0].start, spans[-1].end, walked[-1].last_event_at if walked else -1, ordinal,
        sum(span.anonymous for span in spans), timed[0].first_ts if timed else None,
        min(span.commit_lo for span in timed) if timed else None,  # type: ignore[type-var]
        max(span.commit_hi for span in timed) if timed else None,  # type: ignore[type-var]
        timed[-1].last_commit_ts if timed else None,
        next((span.last_commit_at for span in reversed(grouped) if span.last_commit_at is not None), None),
        grouped[-1].last_gtid_at if grouped else None,
        tuple(SpanPair(d, s, *values) for (d, s), values in pairs.items()), tuple(loose[:LOOSE_MAX]),
        len(loose) > LOOSE_MAX or any(span.barrier for span in spans), mysql)


def span_to_json(span: Span) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "span": [span.start, span.end, span.last_event_at, span.groups, span.anonymous, span.first_ts,
                 span.commit_lo, span.commit_hi, span.last_commit_ts, span.last_commit_at, span.last_gtid_at],
        "pairs": [[p.domain, p.server, p.count, p.lo, p.hi, p.last, p.last_ordinal] for p in span.pairs],
        "loose": list(span.loose),
    }
    if span.barrier:
        raw["barrier"] = True
    if span.mysql is not None:
        raw["mysql"] = str(span.mysql).replace("\n", "")
    return raw


def span_from_json(raw: dict[str, Any]) -> Span:
    """Raises ValueError, TypeError or KeyError for anything that is not a span written by span_to_json."""
    fields = raw["span"]
    if not isinstance(fields, list) or len(fields) != 11:
        raise ValueError("a span has 11 fields")
    start, end, last_event_at, groups, anonymous = (_int(value) for value in fields[:5])
    first_ts, commit_lo, commit_hi, last_commit_ts, last_commit_at, last_gtid_at = (
        None if value is None else _int(value) for value in fields[5:])
    pairs = tuple(SpanPair(*(_int(value) for value in pair)) for pair in raw["pairs"])
    mysql = GtidSet.parse(raw["mysql"]) if "mysql" in raw else None
    if not 4 <= start <= end:
        raise ValueError(f"span [{start}, {end}) is not a stretch of a file")
    return Span(start, end, last_event_at, groups, anonymous, first_ts, commit_lo, commit_hi, last_commit_ts,
                last_commit_at, last_gtid_at, pairs=pairs, loose=tuple(_int(at) for at in raw["loose"]),
                barrier=bool(raw.get("barrier", False)), mysql=mysql)


def _int(value: object) -> int:
    if type(value) is not int:
        raise TypeError(f"{value!r} is not an integer")
    return value


def checksum_of_fde(fde: bytes | memoryview) -> bool:
    """The file's events end in a CRC32 (the FORMAT_DESCRIPTION's algorithm byte)."""
    return len(fde) >= ev.HEADER_LEN + 57 + 5 and fde[-5] == ev.CHECKSUM_CRC32


class PySpanWalker:
    """The walk in Python: told every event of a file in order (whole events only)."""

    def __init__(self, offset: int = 4, crc: bool = False) -> None:
        self.reset(offset, crc)

    def reset(self, offset: int, crc: bool) -> None:
        """Start at ``offset`` (a clean point), in a file whose events end in a CRC32 if ``crc``."""
        self.offset = offset
        self.crc = crc
        self.broken = False
        self._mode = _NONE
        self._open: tuple[int, int, int, int, int, int] | None = None  # kind, domain, server, seq, ts, at
        self._open_mysql: list[bytes] = []
        self._new_span(offset)

    def _new_span(self, start: int) -> None:
        self._start = self._clean_end = start
        self._last_event_at = -1
        self._groups = self._anonymous = self._ordinal = 0
        self._first_ts: int | None = None
        self._commit: list[int] | None = None  # lo, hi, last ts
        self._last_commit_at: int | None = None
        self._last_gtid_at: int | None = None
        self._pairs: dict[tuple[int, int], list[int]] = {}  # count, lo, hi, last, ordinal
        self._loose: list[int] = []
        self._barrier = False
        self._mysql: list[bytes] = []

    @property
    def clean_end(self) -> int:
        return self._clean_end

    @property
    def span_start(self) -> int:
        return self._start

    def walk(self, chunks: Iterable[bytes | memoryview], offset: int) -> None:
        """The next events of the file, from ``offset`` (where the last walk ended)."""
        if offset != self.offset:
            raise ValueError(f"the walk is at {self.offset}, not {offset}")
        for chunk in chunks:
            self.walk_events(chunk, len(chunk))

    def walk_events(self, block: bytes | memoryview, size: int, interval: int = 0) -> int:
        """The whole events at the start of ``block[:size]``, or (``interval``) up to the first
        clean point ``interval`` bytes or more past the span's start; returns the bytes walked."""
        pos = 0
        while not self.broken and pos + ev.HEADER_LEN <= size:
            length = _U32.unpack_from(block, pos + 9)[0]
            if length < ev.HEADER_LEN or pos + length > size:
                break
            self._event(block[pos : pos + length], self.offset)
            self.offset += length
            pos += length
            if interval and self._clean_end == self.offset and self._clean_end - self._start >= interval:
                break
        return pos

    def _event(self, event: bytes | memoryview, at: int) -> None:
        etype = event[4]
        if etype == ev.GTID_EVENT:
            if len(event) < ev.HEADER_LEN + 13:
                self.broken = True
                return
            self._close_unended()
            seq_no, domain, flags2 = _GTID_BODY.unpack_from(event, ev.HEADER_LEN)
            self._open = (_KIND_MARIADB, domain, _U32.unpack_from(event, 5)[0], seq_no, _timestamp(event), at)
            self._mode = _STANDALONE if flags2 & ev.FL_STANDALONE else _TRANSACTION
        elif etype in _MYSQL_GTIDS or etype == ev.ANONYMOUS_GTID_LOG_EVENT:
            self._close_unended()
            kind = _KIND_ANONYMOUS if etype == ev.ANONYMOUS_GTID_LOG_EVENT else _KIND_MYSQL
            self._open = (kind, 0, 0, 0, _timestamp(event), at)
            if kind == _KIND_MYSQL:
                self._open_mysql.append(bytes(event))
            self._mode = _MYSQL_GROUP
        elif self._mode == _NONE:
            if etype == ev.FORMAT_DESCRIPTION_EVENT:
                self.crc = checksum_of_fde(event)
            self._loose_event(at, len(event))
        elif self._ends_group(etype, event):
            self._close(at, len(event), _timestamp(event))

    def _ends_group(self, etype: int, event: bytes | memoryview) -> bool:
        mode = self._mode
        if mode == _TRANSACTION:
            return etype in (ev.XID_EVENT, ev.XA_PREPARE_LOG_EVENT) or (
                etype == ev.QUERY_EVENT and commits_or_rolls_back(event, self.crc))
        if mode == _STANDALONE:
            return etype not in PART_OF_GROUP
        if etype in (ev.XID_EVENT, ev.XA_PREPARE_LOG_EVENT, ev.TRANSACTION_PAYLOAD_EVENT):
            return True
        if etype != ev.QUERY_EVENT:
            return False
        head = query_head(event)
        if mode == _MYSQL_GROUP and head.startswith(_MYSQL_OPENERS):
            self._mode = _MYSQL_TRANSACTION
            return False
        return mode == _MYSQL_GROUP or (head.startswith(_MYSQL_ENDERS) and not head.startswith(b"ROLLBACK TO"))

    def _close_unended(self) -> None:
        """A group start while a group is open (the binlog cut one short): the open one counts
        as ended at the event before."""
        if self._open is not None:
            self._close(self._open[5], 0, self._open[4], unended=True)

    def _close(self, at: int, length: int, commit_ts: int, unended: bool = False) -> None:
        kind, domain, server, seq_no, gtid_ts, gtid_at = self._open  # type: ignore[misc]
        self._ordinal += 1
        if kind == _KIND_MARIADB:
            pair = self._pairs.get((domain, server))
            if pair is None:
                self._pairs[(domain, server)] = [1, seq_no, seq_no, seq_no, self._ordinal]
            else:
                pair[0] += 1
                pair[1], pair[2] = min(pair[1], seq_no), max(pair[2], seq_no)
                pair[3], pair[4] = seq_no, self._ordinal
        elif kind == _KIND_MYSQL:
            self._mysql += self._open_mysql
        else:
            self._anonymous += 1
        self._open_mysql = []
        self._groups += 1
        if self._first_ts is None:
            self._first_ts = gtid_ts
        if self._commit is None:
            self._commit = [commit_ts, commit_ts, commit_ts]
        else:
            self._commit = [min(self._commit[0], commit_ts), max(self._commit[1], commit_ts), commit_ts]
        self._last_gtid_at = gtid_at
        self._mode = _NONE
        self._open = None
        if not unended:
            self._last_commit_at = at
            self._clean_end, self._last_event_at = at + length, at

    def _loose_event(self, at: int, length: int) -> None:
        if len(self._loose) < LOOSE_MAX:
            self._loose.append(at)
        else:
            self._barrier = True
        self._clean_end, self._last_event_at = at + length, at

    def take(self, reset: bool = True) -> Span:
        """The span from its start to the clean end; with ``reset`` the next span starts there
        (a group still open is carried over to it)."""
        commit: Sequence[int | None] = self._commit or [None, None, None]
        span = Span(self._start, self._clean_end, self._last_event_at, self._groups, self._anonymous,
                    self._first_ts, commit[0], commit[1], commit[2], self._last_commit_at, self._last_gtid_at,
                    tuple(SpanPair(d, s, *values) for (d, s), values in self._pairs.items()),
                    tuple(self._loose), self._barrier, mysql_set(self._mysql))
        if reset:
            open_group, open_mysql, mode = self._open, self._open_mysql, self._mode
            self._new_span(self._clean_end)
            self._open, self._open_mysql, self._mode = open_group, open_mysql, mode
        return span


class CompiledSpanWalker:
    """The same walk in C: its state lives in a bytearray only _scan.c reads."""

    def __init__(self, offset: int = 4, crc: bool = False) -> None:
        assert _compiled is not None
        self._ctx = _compiled.span_walker()
        self._mysql: list[bytes] = []  # MySQL GTID events walked, of closed groups first
        self.reset(offset, crc)

    def reset(self, offset: int, crc: bool) -> None:
        _compiled.span_reset(self._ctx, offset, crc)
        self._mysql.clear()

    @property
    def offset(self) -> int:
        return _compiled.span_position(self._ctx)[0]

    @property
    def clean_end(self) -> int:
        return _compiled.span_position(self._ctx)[1]

    @property
    def span_start(self) -> int:
        return _compiled.span_position(self._ctx)[2]

    @property
    def broken(self) -> bool:
        return bool(_compiled.span_position(self._ctx)[3])

    def walk(self, chunks: Sequence[bytes | memoryview], offset: int) -> None:
        _compiled.span_walk(self._ctx, chunks, offset, self._mysql)

    def walk_events(self, block: bytes | memoryview, size: int, interval: int = 0) -> int:
        return _compiled.span_walk_block(self._ctx, block, size, self._mysql, interval)

    def take(self, reset: bool = True) -> Span:
        (start, end, last_event_at, groups, anonymous, first_ts, commit_lo, commit_hi, last_commit_ts,
         last_commit_at, last_gtid_at, pairs, loose, barrier, mysql_closed
         ) = _compiled.span_take(self._ctx, reset)
        mysql = mysql_set(self._mysql[:mysql_closed])
        if reset:
            del self._mysql[:mysql_closed]
        return Span(start, end, last_event_at, groups, anonymous, first_ts, commit_lo, commit_hi, last_commit_ts,
                    last_commit_at, last_gtid_at, tuple(SpanPair(*pair) for pair in pairs), loose, bool(barrier),
                    mysql)


SpanWalker = CompiledSpanWalker if _compiled is not None else PySpanWalker
AnySpanWalker: TypeAlias = PySpanWalker | CompiledSpanWalker  # in annotations, for either


def mysql_set(gtid_events: list[bytes]) -> GtidSet | None:
    if not gtid_events:
        return None
    gtids = GtidSet()
    for event in gtid_events:
        gtid = gtid_of_event(event)
        if gtid is not None:
            gtids.add(gtid)
    return gtids


def commits_or_rolls_back(event: bytes | memoryview, crc: bool) -> bool:
    """Query_log_event::peek_is_commit_rollback: the statement is exactly COMMIT or ROLLBACK (the
    byte before it ends the database name)."""
    end = len(event) - (ev.CRC_LEN if crc else 0)
    tail = bytes(event[max(end - 9, 0) : end])
    return tail.endswith(b"\x00COMMIT") or tail == b"\x00ROLLBACK"


def query_head(event: bytes | memoryview) -> bytes:
    """The first 12 bytes of a QUERY event's statement, upper-cased."""
    if len(event) < ev.HEADER_LEN + ev.QUERY_POST_HEADER_LEN:
        return b""
    start = ev.query_text_start(event)
    return bytes(event[start : start + 12]).upper()


def _timestamp(event: bytes | memoryview) -> int:
    return _U32.unpack_from(event, 0)[0]
