"""What to read from a relay data_dir: files, readable ends, group-aligned ranges (no Spark).

The data_dir layout (relay.storage): the primary's binlog files under their own names, in
the order of ``binlog.index``, and ``relay-state.json`` with a durable checkpoint. Files
before the last one are complete. The last one may be growing: the relay appends events as
they arrive and a group may be half written, so its readable end is the last group end a
scan of its events finds (starting from the checkpoint when it names that file).

Ranges always start and end at group boundaries (GroupTracker), so every range decodes on
its own: a range reader only needs the file's FORMAT_DESCRIPTION event besides.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..binlog import events as ev
from ..binlog.groups import GroupTracker
from ..errors import FatalError
from ..gtid.gtid import GtidError, parse_gtid_position
from ..gtid.spans import Span
from ..rows.changes import GtidRange
from ..storage.files import DataDirError
from ..storage.history import HistoryIndex
from ..storage.index import read_index, valid_binlog_name
from ..storage.scan import iter_events
from ..storage.state import read_state

DEFAULT_SPLIT_BYTES = 64 << 20


class PlanError(FatalError, ValueError):
    """Bad options, or a data_dir that cannot be read as asked."""


@dataclass(frozen=True, order=True)
class FilePos:
    file: str
    pos: int

    def __str__(self) -> str:
        return f"{self.file}:{self.pos}"


@dataclass(frozen=True)
class Bound:
    """A since/until option: a file position, or a MariaDB GTID position (domain -> seq_no)."""

    file_pos: FilePos | None = None
    gtids: dict[int, int] = field(default_factory=dict)


def parse_bound(text: str | None, what: str = "since") -> Bound | None:
    """'mysql-bin.000003:1234' or '0-1-500[,1-2-7]' (MariaDB GTIDs, one per domain)."""
    if text is None or not text.strip():
        return None
    text = text.strip()
    name, colon, pos = text.rpartition(":")
    if colon and valid_binlog_name(name) and pos.isdigit():
        return Bound(file_pos=FilePos(name, int(pos)))
    try:
        position = parse_gtid_position(text)
    except GtidError:
        position = {}
    if not position:
        raise PlanError(f"{what}={text!r}: expected FILE:POS (mysql-bin.000003:1234) or a MariaDB "
                        "GTID position (0-1-500, or one per domain: 0-1-500,1-2-7)")
    return Bound(gtids={d: g.seq_no for d, g in position.items()})


@dataclass(frozen=True)
class FileRange:
    """[start, end) of one stored file; both are group boundaries."""

    name: str
    path: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return max(0, self.end - self.start)


@dataclass
class Plan:
    ranges: list[FileRange]
    gtids: GtidRange
    files: list[str]

    @property
    def total_bytes(self) -> int:
        return sum(r.size for r in self.ranges)


# --------------------------------------------------------------------------- the data_dir


def stored_files(data_dir: str | os.PathLike[str]) -> list[str]:
    """The binlog files of a data_dir, oldest first (binlog.index)."""
    path = Path(data_dir)
    if not path.is_dir():
        raise PlanError(f"{path} is not a directory")
    try:
        return read_index(path)
    except DataDirError as exc:
        raise PlanError(str(exc)) from None


def _scan(path: str, start: int, end: int | None = None) -> tuple[list[int], int]:
    """Group ends after ``start`` (a group boundary) up to ``end``: (ends, last end)."""
    ends: list[int] = []
    last = start
    tracker = GroupTracker()
    with open(path, "rb") as stream:
        if end is None:
            end = os.fstat(stream.fileno()).st_size
        for offset, event in iter_events(stream, start, end):
            if tracker.ends_group(event[4], event):
                last = offset + len(event)
                ends.append(last)
    return ends, last


_boundaries_cache: dict[tuple[str, int, int], list[int]] = {}


def group_boundaries(path: str, end: int) -> list[int]:
    """Every group boundary in [4, end] of a file: 4 and each group end (cached per file state)."""
    st = os.stat(path)
    key = (path, end, st.st_mtime_ns)
    hit = _boundaries_cache.get(key)
    if hit is None:
        ends, _ = _scan(path, 4, end)
        hit = [4] + ends
        if len(_boundaries_cache) > 256:
            _boundaries_cache.clear()
        _boundaries_cache[key] = hit
    return hit


class TailScanner:
    """The readable end of the newest file, found incrementally (one per streaming query)."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = Path(data_dir)
        self._at: tuple[str, int] | None = None  # (file, group end scanned up to)

    def readable_end(self, name: str) -> int:
        path = str(self.data_dir / name)
        start = 4
        if self._at is not None and self._at[0] == name:
            start = self._at[1]
        else:
            try:
                checkpoint = read_state(self.data_dir).checkpoint
            except DataDirError:
                checkpoint = None
            if checkpoint is not None and checkpoint.file == name:
                start = checkpoint.position
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise PlanError(f"{path} is listed in binlog.index but missing") from None
        if start > size or start < 4:
            start = 4
        if size <= 4:
            end = size if size == 4 else 4
        else:
            _, end = _scan(path, start, size)
        self._at = (name, end)
        return end


def file_end(data_dir: Path, name: str, last: bool, tail: TailScanner | None = None) -> int:
    """How far ``name`` may be read: its size when closed, the last group end when newest."""
    if not last:
        try:
            return os.stat(data_dir / name).st_size
        except FileNotFoundError:
            raise PlanError(f"{data_dir / name} is listed in binlog.index but missing (purged?)") from None
    return (tail or TailScanner(data_dir)).readable_end(name)


# --------------------------------------------------------------------------- splitting


def split_range(path: str, name: str, start: int, end: int, split_bytes: int) -> list[FileRange]:
    """[start, end) cut at group boundaries into pieces of about split_bytes (a group is never cut;
    a file up to 1.5 split_bytes stays whole without scanning)."""
    if end <= start:
        return []
    if split_bytes <= 0 or end - start <= split_bytes * 3 // 2:
        return [FileRange(name, path, start, end)]
    cuts = [start]
    for b in group_boundaries(path, end):
        if b <= start or b >= end:
            continue
        if b - cuts[-1] >= split_bytes and end - b >= split_bytes // 2:
            cuts.append(b)
    cuts.append(end)
    return [FileRange(name, path, s, e) for s, e in zip(cuts, cuts[1:])]


def snap_up(path: str, end: int, pos: int) -> int:
    """The first group boundary at or after pos (end if none)."""
    if pos <= 4:
        return 4
    for b in group_boundaries(path, end):
        if b >= pos:
            return b
    return end


def snap_down(path: str, end: int, pos: int) -> int:
    """The last group boundary at or before pos."""
    best = 4
    for b in group_boundaries(path, end):
        if b > pos:
            break
        best = b
    return best


# --------------------------------------------------------------------------- planning


def plan_ranges(data_dir: str | os.PathLike[str], since: Bound | None = None, until: Bound | None = None,
                split_bytes: int = DEFAULT_SPLIT_BYTES, tail: TailScanner | None = None) -> Plan:
    """The ranges a batch read covers: every stored file (the newest up to its readable end),
    from ``since`` to ``until`` (snapped to the group boundaries at or after / at or before
    them), cut into group-aligned pieces."""
    root = Path(data_dir)
    files = stored_files(root)
    gtids = GtidRange(since.gtids if since else None, until.gtids if until else None)
    if not files:
        return Plan([], gtids, files)
    first, last = 0, len(files) - 1
    start_pos: int | None = None
    stop_pos: int | None = None
    if since and since.file_pos:
        first = _index_of(files, since.file_pos.file, "since")
        start_pos = since.file_pos.pos
    if until and until.file_pos:
        last = _index_of(files, until.file_pos.file, "until")
        stop_pos = until.file_pos.pos
    ranges: list[FileRange] = []
    ends = {name: file_end(root, name, i == len(files) - 1, tail) for i, name in enumerate(files[first : last + 1],
                                                                                          first)}
    history = HistoryIndex(root, lambda: files, ends.__getitem__, writable=False) if gtids else None
    for i in range(first, last + 1):
        name = files[i]
        path = str(root / name)
        end = ends[name]
        start = 4
        if i == first and start_pos is not None:
            start = snap_up(path, end, start_pos)
        if i == last and stop_pos is not None:
            end = min(end, snap_down(path, end, stop_pos) if stop_pos < end else end)
        if history is not None:
            start, end = _wanted_stretch(gtids, path, history.spans(name), start, end)
        if start < end:
            ranges.extend(split_range(path, name, start, end, split_bytes))
    return Plan(ranges, gtids, files)


def _index_of(files: list[str], name: str, what: str) -> int:
    try:
        return files.index(name)
    except ValueError:
        raise PlanError(f"{what}: {name} is not among the stored files "
                        f"({files[0]} ... {files[-1]})") from None


def _wanted_stretch(gtids: GtidRange, path: str, spans: list[Span], start: int, end: int) -> tuple[int, int]:
    """[start, end) without the spans of the index at either end that hold no wanted group (the
    GTID bounds are read from the index, not by decoding the file)."""
    with open(path, "rb") as stored:
        unwanted = [not _may_hold_wanted(gtids, span, stored) for span in spans]
    for span, skip in zip(spans, unwanted):
        if not skip or span.end > end:
            break
        start = max(start, span.end)
    for span, skip in zip(reversed(spans), reversed(unwanted)):
        if not skip or span.start < start:
            break
        end = min(end, span.start)
    return start, max(start, end)


_NEUTRAL = frozenset({ev.FORMAT_DESCRIPTION_EVENT, ev.ROTATE_EVENT, ev.STOP_EVENT, ev.GTID_LIST_EVENT,
                      ev.BINLOG_CHECKPOINT_EVENT, ev.PREVIOUS_GTIDS_LOG_EVENT, ev.START_ENCRYPTION_EVENT})


def _may_hold_wanted(gtids: GtidRange, span: Span, stored: BinaryIO) -> bool:
    """A span may hold a wanted group unless every group in it has a MariaDB GTID outside the
    bounds and its events outside any group are none that the decoder turns into rows."""
    if span.barrier or span.anonymous or span.mysql is not None or sum(p.count for p in span.pairs) != span.groups:
        return True
    for pair in span.pairs:
        low, high = gtids.since.get(pair.domain), gtids.until.get(pair.domain)
        if not ((low is not None and pair.hi <= low) or (high is not None and pair.lo > high)):
            return True
    for at in span.loose:
        stored.seek(at + 4)
        if stored.read(1)[0] not in _NEUTRAL:
            return True
    return False


def stream_ranges(data_dir: str | os.PathLike[str], start: FilePos, end: FilePos,
                  split_bytes: int = DEFAULT_SPLIT_BYTES) -> list[FileRange]:
    """The ranges between two streaming offsets (both group ends found earlier)."""
    root = Path(data_dir)
    files = stored_files(root)
    if not end.file or (start.file == end.file and start.pos >= end.pos):
        return []
    last = _index_of(files, end.file, "end offset")
    first = _index_of(files, start.file, "start offset") if start.file else 0
    ranges: list[FileRange] = []
    for i in range(first, last + 1):
        name = files[i]
        path = str(root / name)
        lo = start.pos if (i == first and start.file) else 4
        hi = end.pos if i == last else file_end(root, name, False)
        ranges.extend(split_range(path, name, max(lo, 4), hi, split_bytes))
    return ranges


def latest_position(data_dir: str | os.PathLike[str], tail: TailScanner | None = None) -> FilePos | None:
    """The last readable group end of the data_dir (None when it holds no file yet)."""
    root = Path(data_dir)
    files = stored_files(root)
    if not files:
        return None
    return FilePos(files[-1], file_end(root, files[-1], True, tail))


_NUM = re.compile(r"^\d+$")


def parse_size(text: str | int | None, default: int) -> int:
    """'64m', '512k', '1g' or a number of bytes."""
    if text is None or text == "":
        return default
    if isinstance(text, int):
        return text
    t = str(text).strip().lower().rstrip("b")
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(t[-1:], 1)
    t = t[:-1] if mult > 1 else t
    if not _NUM.match(t):
        raise PlanError(f"bad size {text!r}: expected bytes or a number with k, m or g")
    return int(t) * mult
