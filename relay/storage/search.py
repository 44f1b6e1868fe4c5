"""``binlog-relay search``: where the stored history holds a moment or some GTIDs, read from the
index of the stored history (history.py) instead of a walk of every file.

By time: the last transaction committed at or before a moment, i.e. the one before the first
transaction (in binlog order) whose commit event's header time is later.  (``mariadb-binlog
--stop-datetime=T`` stops at the first event stamped T or later: it replays what this answers for
T minus one second.)  Its end is where to stop a replay, and the GTID position there what `START SLAVE UNTIL
master_gtid_pos` takes.  By GTID: the files (and the transaction) holding MariaDB GTIDs, or the
files holding part of a MySQL GTID set.  Files that cannot hold the answer are passed by the
summary on the last line of their index; the one that may is walked a span at most.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from ..binlog import events as ev
from ..errors import InputError
from ..gtid.gtid import BinlogState, Gtid, format_gtid_position
from ..gtid.mysqlgtid import GtidSet, MysqlGtidError, gtid_of_event, previous_gtids
from ..gtid.spans import Span, SpanWalker, apply_span
from .history import HistoryIndex, walk_file, walk_spans
from .index import read_index
from .scan import iter_events


class SearchError(InputError):
    """What was asked cannot be searched for (the message says why)."""


@dataclass(frozen=True)
class Transaction:
    """One transaction of the stored history."""

    file: str
    pos: int  # its first event (the GTID event)
    end_pos: int  # right after its commit event
    gtid: str | None
    server_id: int
    commit_timestamp: int

    def as_json(self) -> dict[str, Any]:
        return {"file": self.file, "pos": self.pos, "end_pos": self.end_pos, "gtid": self.gtid,
                "server_id": self.server_id, "commit_timestamp": self.commit_timestamp,
                "commit_time": _utc(self.commit_timestamp)}


class StoredHistory:
    """A data_dir's files and their index, read only (the relay may be writing beside it)."""

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir)
        if not self.data_dir.is_dir():
            raise SearchError(f"{self.data_dir} is not a directory")
        self.files = read_index(self.data_dir)
        if not self.files:
            raise SearchError(f"{self.data_dir} holds no binlog file (no {self.data_dir / 'binlog.index'})")
        # The newest file is read up to its last clean point: a group still being written is not seen.
        self.index = HistoryIndex(self.data_dir, lambda: self.files, self._size, writable=False)

    def _size(self, name: str) -> int:
        return os.stat(self.data_dir / name).st_size

    # ------------------------------------------------------------------ by time

    def at_time(self, moment: int) -> dict[str, Any]:
        """The last transaction committed at or before ``moment`` (seconds since the epoch)."""
        before: tuple[str, Span] | None = None  # a span (of a file, or a file) whose last group is the last before
        for name in self.files:
            whole = self.index.summary(name)
            if whole is not None and (whole.commit_hi is None or whole.commit_hi <= moment):
                before = (name, whole) if whole.groups else before
                continue
            for span in self.index.spans(name):
                if span.commit_hi is None or span.commit_hi <= moment:
                    before = (name, span) if span.groups else before
                    continue
                for group in self._groups(name, span):
                    if group.last_commit_ts is not None and group.last_commit_ts > moment:
                        return self._answer(moment, before, (name, group))
                    before = (name, group)
        return self._answer(moment, before, None)

    def _answer(self, moment: int, last: tuple[str, Span] | None, after: tuple[str, Span] | None) -> dict[str, Any]:
        transaction = self._last_of(*last) if last else None
        return {"time": _utc(moment), "timestamp": moment,
                "transaction": transaction.as_json() if transaction else None,
                "gtid_position": self.gtid_position(transaction.file, transaction.end_pos) if transaction else None,
                "next": self._last_of(*after).as_json() if after else None}

    def _last_of(self, name: str, span: Span) -> Transaction:
        """The last group of ``span`` (a span of ``name``, or all of it) from what it names."""
        assert span.last_gtid_at is not None and span.last_commit_at is not None and span.last_commit_ts is not None
        with open(self.data_dir / name, "rb") as stored:
            stored.seek(span.last_commit_at + 9)
            commit_length = int.from_bytes(stored.read(4), "little")
            stored.seek(span.last_gtid_at)
            header = stored.read(ev.HEADER_LEN)
            length = int.from_bytes(header[9:13], "little")
            gtid_event = header + stored.read(length - ev.HEADER_LEN)
        return Transaction(name, span.last_gtid_at, span.last_commit_at + commit_length, _gtid_text(gtid_event),
                           int.from_bytes(gtid_event[5:9], "little"), span.last_commit_ts)

    def _groups(self, name: str, span: Span) -> Iterator[Span]:
        """The groups of ``span`` one by one, as spans of a group each (a walk that stops at every
        group end)."""
        path = self.data_dir / name
        for group in walk_spans(SpanWalker(span.start, _checksummed(path)), path, span.start, span.end, 1):
            if group.groups:
                yield group

    # ------------------------------------------------------------------ by GTID

    def holding(self, text: str) -> dict[str, Any]:
        """Where MariaDB GTIDs ('0-1-100,1-2-5') are, or which files hold part of a MySQL GTID set."""
        wanted = parse_gtids(text)
        if isinstance(wanted, dict):
            found = [self._find(gtid) for gtid in wanted.values()]
            return {"gtids": [{"gtid": str(gtid), "transaction": t.as_json() if t else None}
                              for gtid, t in zip(wanted.values(), found)],
                    "files": sorted({t.file for t in found if t}, key=self.files.index)}
        gtid_set = wanted
        files = []
        for name in self.files:
            spans = [self.index.summary(name)] if name != self.files[-1] else self.index.spans(name)
            held = GtidSet()
            for span in spans:
                if span is not None and span.mysql is not None:
                    held.update(span.mysql)
            common = held.minus(held.minus(gtid_set))
            if common:
                files.append({"file": name, "gtids": str(common).replace("\n", "")})
        return {"gtid_set": str(gtid_set).replace("\n", ""), "files": files}

    def _find(self, gtid: Gtid) -> Transaction | None:
        for name in self.files:
            whole = self.index.summary(name)
            if whole is not None and not _may_hold(whole, gtid):
                continue
            for span in self.index.spans(name):
                if _may_hold(span, gtid):
                    for group in self._groups(name, span):
                        if group.last_gtid == gtid:
                            return self._last_of(name, group)
        return None

    # ------------------------------------------------------------------ GTID positions

    def gtid_position(self, name: str, position: int) -> str:
        """What the history holds up to ``position`` of ``name``: MariaDB's last GTID per domain
        (BINLOG_GTID_POS), or MySQL's executed GTID set."""
        with open(self.data_dir / name, "rb") as stored:
            heading = [event for _, event in iter_events(stored, 4, min(position, 1 << 16), 1 << 16)][:3]
        spans = [span for span in self.index.spans(name) if span.end <= position]
        start = spans[-1].end if spans else 4
        if start < position:
            spans.append(walk_file(self.data_dir / name, start, position))
        previous = next((event for event in heading if event[4] == ev.PREVIOUS_GTIDS_LOG_EVENT), None)
        if previous is not None:
            executed = previous_gtids(previous, ev.CHECKSUM_CRC32 if _checksummed(self.data_dir / name) else 0)
            for span in spans:
                if span.mysql is not None:
                    executed.update(span.mysql)
            return str(executed).replace("\n", "")
        listed = next((event for event in heading if event[4] == ev.GTID_LIST_EVENT), None)
        state = BinlogState(Gtid(g.domain_id, g.server_id, g.seq_no) for g in ev.parse_gtid_list(listed)) \
            if listed is not None else BinlogState()
        for span in spans:
            apply_span(state, span)
        return format_gtid_position(state.most_recent())


# The moments a search takes: from 0001-01-01 to 9999-12-31 23:59:59 UTC, as datetime (and MariaDB's
# DATETIME) has them.
MIN_MOMENT, MAX_MOMENT = -62135596800, 253402300799
MAX_UINT32, MAX_UINT64, MAX_GNO = 2**32 - 1, 2**64 - 1, 2**63 - 1  # MySQL's GNOs are 1 .. 2^63-1
_MARIADB_GTID = re.compile(r"(\d+)-(\d+)-(\d+)", re.ASCII)
_MYSQL_INTERVAL = re.compile(r"(\d+)(?:-(\d+))?", re.ASCII)
_MYSQL_TAG = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}", re.ASCII)
_MARIADB_FORM = "MariaDB GTIDs (0-1-100,1-2-5)"
_MYSQL_FORM = "a MySQL GTID set (3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5)"


def parse_moment(text: str) -> int:
    """'YYYY-MM-DD HH:MM:SS' (UTC unless an offset follows, e.g. +02:00) or '@SECONDS'."""
    from datetime import datetime

    text = text.strip()
    if seconds := re.fullmatch(r"@(\d+)", text, re.ASCII):
        moment = int(seconds.group(1)) if len(seconds.group(1)) <= 20 else MAX_MOMENT + 1
    else:
        try:
            parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise SearchError(f"{text!r} is not a time: give 'YYYY-MM-DD HH:MM:SS' (UTC), with an offset such as "
                              "'+02:00' for another zone, or '@' and seconds since the epoch") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        moment = int(parsed.timestamp())
    if not MIN_MOMENT <= moment <= MAX_MOMENT:
        raise SearchError(f"{text!r} is not a time a search takes: it must be from year 1 to 9999 "
                          f"(@{MAX_MOMENT} at most)")
    return moment


def parse_gtids(text: str) -> dict[int, Gtid] | GtidSet:
    """``--gtid``: MariaDB GTIDs, one per domain ({domain: Gtid}), or a MySQL GTID set whose
    intervals each name transactions (GNOs 1 to 2^63-1, low to high).  SearchError says what is wrong."""
    parts = [part for part in (part.strip() for part in text.replace("\n", "").split(",")) if part]
    if not parts:
        raise SearchError(f"no GTID given: give {_MARIADB_FORM} or {_MYSQL_FORM}")
    matches = [_MARIADB_GTID.fullmatch(part) for part in parts]
    if all(matches):
        return _mariadb_gtids(parts, [match.groups() for match in matches if match is not None])
    try:
        gtid_set = GtidSet.parse(text)
    except (MysqlGtidError, ValueError):
        raise SearchError(f"{text!r} is neither {_MARIADB_FORM} nor {_MYSQL_FORM}") from None
    for part in parts:
        _check_mysql_intervals(part)
    return gtid_set


def _mariadb_gtids(parts: list[str], numbers: list[tuple[str, ...]]) -> dict[int, Gtid]:
    wanted: dict[int, Gtid] = {}
    for part, digits in zip(parts, numbers, strict=True):
        gtid = Gtid(*(int(n) if len(n) <= 20 else MAX_UINT64 + 1 for n in digits))  # within int()'s limit
        for what, value, most in (("domain id", gtid.domain_id, MAX_UINT32),
                                  ("server id", gtid.server_id, MAX_UINT32), ("seq_no", gtid.seq_no, MAX_UINT64)):
            if value > most:
                raise SearchError(f"GTID {part}: its {what} is over {most}, the largest there is")
        if gtid.domain_id in wanted:
            raise SearchError(f"GTIDs {wanted[gtid.domain_id]} and {gtid} are both of domain {gtid.domain_id}: "
                              "a search takes one GTID per domain (search them one at a time)")
        wanted[gtid.domain_id] = gtid
    return wanted


def _check_mysql_intervals(part: str) -> None:
    """One uuid's part of a MySQL GTID set names transactions as MySQL would take them."""
    items = [item for item in part.partition(":")[2].split(":") if item]
    for item in items:
        interval = _MYSQL_INTERVAL.fullmatch(item)
        if interval is None:
            if not _MYSQL_TAG.fullmatch(item):
                raise SearchError(f"{part!r}: {item!r} is neither an interval (1-5) nor a tag")
            continue
        low = int(interval.group(1))
        high = int(interval.group(2) or low)
        if low == 0:
            raise SearchError(f"{part!r}: interval {item}: MySQL numbers transactions (GNOs) from 1")
        if high < low:
            raise SearchError(f"{part!r}: interval {item} is reversed: give {high}-{low}")
        if high > MAX_GNO:
            raise SearchError(f"{part!r}: interval {item}: a GNO is at most {MAX_GNO}")
    if not any(_MYSQL_INTERVAL.fullmatch(item) for item in items):
        raise SearchError(f"{part!r} names no transaction: give its intervals, as {part.rstrip(':')}:1-5")


def _may_hold(span: Span, gtid: Gtid) -> bool:
    return any(p.domain == gtid.domain_id and p.server == gtid.server_id and p.lo <= gtid.seq_no <= p.hi
               for p in span.pairs)


def _gtid_text(event: bytes) -> str | None:
    if event[4] == ev.GTID_EVENT:
        seq_no = int.from_bytes(event[ev.HEADER_LEN : ev.HEADER_LEN + 8], "little")
        domain = int.from_bytes(event[ev.HEADER_LEN + 8 : ev.HEADER_LEN + 12], "little")
        return f"{domain}-{int.from_bytes(event[5:9], 'little')}-{seq_no}"
    gtid = gtid_of_event(event)
    return str(gtid) if gtid is not None else None


def _checksummed(path: Path) -> bool:
    with open(path, "rb") as stored:
        for _, event in iter_events(stored, 4, 1 << 16, 1 << 16):
            return ev.parse_format_description(event).checksum_alg == ev.CHECKSUM_CRC32
    return False


def _utc(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
