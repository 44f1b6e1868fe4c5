"""The index of the stored history: for each stored binlog file, its spans (gtid/spans.py)
every ``interval`` bytes or so and at its end, in a sidecar ``history-index/<file>.idx``.

Ingest writes it as it stores: the events it appends go through a span walker, and a span is
written once the committed end has passed it (so it names durable bytes only, as the state
file does).  The index is never trusted over the file: when a sidecar is read, each span is
checked against the file (the event ending it is there and ends where the span says, the GTID
it names is the GTID event at the offset it names), and from the first span that fails, or
where the sidecar ends (missing, torn, older than the file), the file itself is walked.  A
sidecar is only ever a cache: deleting the directory loses nothing but time.

JSON lines, each followed by a tab and the CRC32 of its JSON in hex (a torn or flipped line is
where the sidecar ends): a header ``{"binlog_history_index": 1, "file": NAME}``, then one span
per line (spans.span_to_json), then ``{"complete": SIZE, "file": SPAN}`` once the file is closed
and covered whole, with the span of the whole file (what a search reads of the files it passes).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from ..binlog import events as ev
from ..gtid.mysqlgtid import gtid_of_event
from ..gtid.spans import (
    AnySpanWalker,
    Span,
    SpanWalker,
    checksum_of_fde,
    merge_spans,
    span_from_json,
    span_to_json,
)
from .files import atomic_write, fsync_dir, make_durable_dir

log = logging.getLogger(__name__)

INDEX_DIR = "history-index"
FORMAT = 1
DEFAULT_INTERVAL = 4 << 20
_BUILD_BLOCK = 4 << 20
_GTID_TYPES = (ev.GTID_EVENT, ev.GTID_LOG_EVENT, ev.GTID_TAGGED_LOG_EVENT, ev.ANONYMOUS_GTID_LOG_EVENT)
_CHECKED_CRC_MAX = 1 << 16  # the event ending a span is CRC-checked up to this size
_SUMMARY_TAIL = 1 << 20  # the end of a sidecar read for its last line


def sidecar_path(data_dir: Path, name: str) -> Path:
    return data_dir / INDEX_DIR / f"{name}.idx"


@dataclass
class FileSpans:
    """What the index knows of one file: spans from offset 4, contiguous and checked."""

    spans: list[Span]
    complete: bool = False  # the file is closed and the spans end at its end

    @property
    def end(self) -> int:
        return self.spans[-1].end if self.spans else 4


class HistoryIndex:
    """The spans of every stored file.  ``files`` and ``readable_end`` say what is stored: the
    file names in order and how far each may be read (the committed end of the newest)."""

    def __init__(self, data_dir: Path | str, files: Callable[[], list[str]], readable_end: Callable[[str], int],
                 interval: int = DEFAULT_INTERVAL, writable: bool = True,
                 path_of: Callable[[str], Path] | None = None) -> None:
        self.data_dir = Path(data_dir)
        self.files = files
        # where a file is read: data_dir/name, or (a relay with an archive) the copy fetched back of a
        # file only the archive holds, whose index is kept in memory only
        self.path_of = path_of or (lambda name: self.data_dir / name)
        self.readable_end = readable_end
        self.interval = max(1, interval)
        self.writable = writable
        self._known: dict[str, FileSpans] = {}
        self._tails: dict[str, tuple[int, int, Span]] = {}  # name -> (from, to, span): cached tail walks
        # ingest's side: the file being written, its walker and the spans walked but not yet committed
        self._writing: str | None = None
        self._walker: AnySpanWalker | None = None
        self._pending: list[Span] = []
        self._fd: int | None = None

    # ------------------------------------------------------------------ reading

    def spans(self, name: str) -> list[Span]:
        """Spans covering ``name`` from offset 4 to its readable end, exactly: the index's, and a
        walk of what it does not cover yet (the newest file's last few megabytes)."""
        known = self.file_spans(name)
        end = self.readable_end(name)
        covered = [span for span in known.spans if span.end <= end]
        start = covered[-1].end if covered else 4
        if start < end:
            covered.append(self._tail(name, start, end))
        return covered

    def summary(self, name: str) -> Span | None:
        """The span of the whole of a closed file, from the last line of its sidecar when that says
        the file is complete and its size is the file's (a search passing files reads no more),
        else from its spans; None for the newest file."""
        if self._is_newest(name):
            return None
        known = self._known.get(name)
        if known is None or not known.complete:
            whole = _read_summary(sidecar_path(self.data_dir, name), self._size(name))
            if whole is not None:
                return whole
        spans = self.spans(name)
        return merge_spans(spans) if spans else None

    def indexed_spans(self, name: str) -> list[Span]:
        """What the index holds of ``name`` now, without walking the file for the rest (a GTID
        dump walks what is not indexed anyway)."""
        known = self._known.get(name)
        if known is None:
            known = self._known[name] = self._load(name)
        return known.spans

    def file_spans(self, name: str) -> FileSpans:
        """The index of ``name``, read and checked, or built from the file where it falls short."""
        known = self._known.get(name)
        if known is None:
            known = self._load(name)
            self._known[name] = known
        if not known.complete and name != self._writing and not self._is_newest(name):
            self._extend(name, known)
        return known

    def _writes(self, name: str) -> bool:
        """Sidecars are written for the stored files only (not for an archived file read back)."""
        return self.writable and name in self.files()

    def _is_newest(self, name: str) -> bool:
        files = self.files()
        return bool(files) and files[-1] == name

    def _tail(self, name: str, start: int, end: int) -> Span:
        """The span from ``start`` (a clean point) to ``end``, walked from ingest's walker when it is
        exactly there, else from the file (cached until either moves)."""
        walker = self._walker
        if (name == self._writing and walker is not None and not self._pending and walker.span_start == start
                and walker.clean_end == end):
            return walker.take(reset=False)
        cached = self._tails.get(name)
        if cached is not None and cached[0] == start and cached[1] == end:
            return cached[2]
        span = walk_file(self.path_of(name), start, end)
        self._tails[name] = (start, end, span)
        return span

    def _load(self, name: str) -> FileSpans:
        path = sidecar_path(self.data_dir, name)
        try:
            lines = path.read_bytes().split(b"\n")
        except FileNotFoundError:
            return FileSpans([])
        except OSError as exc:
            log.warning("history index %s unreadable (%s): reading %s instead", path, exc, name)
            return FileSpans([])
        spans, complete = _parse_sidecar(lines, name)
        try:
            checked = self._checked(name, spans)
        except OSError:
            return FileSpans([])
        if len(checked) < len(spans):
            log.warning("history index of %s: %d of its %d spans do not match the file (stale or damaged): "
                        "walking the file from %d", name, len(spans) - len(checked), len(spans),
                        checked[-1].end if checked else 4)
            complete = False
            if self._writes(name):
                self._rewrite(name, checked, False)
        known = FileSpans(checked, complete and len(checked) == len(spans))
        if known.complete and (self._is_newest(name) or known.end != self._size(name)):
            known.complete = False
        return known

    def _checked(self, name: str, spans: list[Span]) -> list[Span]:
        """The spans up to the first one the file contradicts."""
        end = self.readable_end(name)
        checked: list[Span] = []
        with open(self.path_of(name), "rb") as stored:
            crc = _file_crc(stored)
            for span in spans:
                if span.start != (checked[-1].end if checked else 4) or span.end > end \
                        or not _matches_file(stored, span, crc):
                    break
                checked.append(span)
        return checked

    def _size(self, name: str) -> int:
        return os.stat(self.path_of(name)).st_size

    def _extend(self, name: str, known: FileSpans) -> None:
        """Walk a closed file from where its index ends to its end, and keep what was walked."""
        size = self._size(name)
        start = known.end
        self._install(name, known, start, size, build_spans(self.path_of(name), start, size, self.interval))

    def _install(self, name: str, known: FileSpans, start: int, size: int, added: list[Span]) -> None:
        known.spans.extend(added)
        known.complete = known.end == size
        if self._writes(name):
            if start == 4:
                self._rewrite(name, known.spans, known.complete)
            else:
                self._append(name, added, known.complete)

    def rebuild(self, name: str) -> None:
        """Index ``name`` again from the file alone (a file imported or put in place)."""
        end = self.readable_end(name)
        spans = build_spans(self.path_of(name), 4, end, self.interval)
        complete = not self._is_newest(name) and bool(spans) and spans[-1].end == end == self._size(name)
        self._known[name] = FileSpans(spans, complete)
        self._tails.pop(name, None)
        if self._writes(name):
            self._rewrite(name, spans, complete)

    async def index_stored_files(self) -> None:
        """Build, in a worker thread, the index of every closed file whose sidecar is missing,
        damaged or short (a relay upgraded in place, files imported or damaged): the first GTID
        request reading them then finds it ready."""
        import trio  # here: `binlog-relay search` reads the index without trio's import time

        for name in list(self.files())[:-1]:
            if name not in self.files():
                continue  # purged meanwhile
            try:
                self.indexed_spans(name)
                known = self._known[name]
                if known.complete:
                    continue
                start, size = known.end, self._size(name)
                added = await trio.to_thread.run_sync(build_spans, self.path_of(name), start, size,
                                                      self.interval)
            except OSError as exc:  # purged while it was read, or unreadable: the index is a cache
                if name in self.files():
                    log.warning("history index of %s not built: %s", name, exc)
                continue
            if self._known.get(name) is known and known.end == start and not known.complete:
                self._install(name, known, start, size, added)
                log.info("history index of %s built from the file (%d spans)", name, len(known.spans))

    # ------------------------------------------------------------------ ingest

    def begin_file(self, name: str) -> None:
        """Ingest starts ``name`` (offset 4, empty): its index starts with it."""
        self._close_fd()
        self._writing = name
        self._pending = []
        self._walker = SpanWalker(4, False)
        self._known[name] = FileSpans([])
        if self.writable:
            self._rewrite(name, [], False)

    def resume(self, name: str, end: int) -> None:
        """Ingest continues ``name`` at ``end`` (after recovery or a cut tail): the index of what
        is stored is read or rebuilt, and the walker set where it ends."""
        self._close_fd()
        self._writing = None
        self._pending = []
        known = self._known[name] = self._load(name)
        known.complete = False
        known.spans[:] = [span for span in known.spans if span.end <= end]
        start = known.end
        with open(self.path_of(name), "rb") as stored:
            crc = _file_crc(stored)
        walker = SpanWalker(start, crc)
        added = _walk_into(walker, self.path_of(name), start, end, self.interval)
        known.spans.extend(added)
        if self.writable:
            self._rewrite(name, known.spans, False)
        self._walker = walker
        self._writing = name

    def walked(self, name: str, start: int, chunks: list[memoryview | bytes]) -> None:
        """Events ingest appended to ``name`` at ``start`` (whole events)."""
        walker = self._walker
        if walker is None or name != self._writing:
            return
        try:
            walker.walk(chunks, start)
        except ValueError:  # not where the walk is: the index of this file is walked from it later
            self._walker = None
            return
        if walker.broken:
            self._walker = None
            return
        if walker.clean_end - walker.span_start >= self.interval:
            self._pending.append(walker.take())

    def committed(self, name: str, end: int) -> None:
        """The committed end is ``end`` of ``name``: the spans walked up to it are written."""
        if name != self._writing or not self._pending:
            return
        due = [span for span in self._pending if span.end <= end]
        if due:
            del self._pending[: len(due)]
            self._publish(name, due, False)

    def finish_file(self, name: str) -> None:
        """``name`` is closed (its ROTATE stored and durable): its last span and its end are written."""
        walker = self._walker
        if name != self._writing:
            return
        size = self._size(name)
        if walker is not None and walker.clean_end == size:
            if walker.clean_end > walker.span_start:
                self._pending.append(walker.take())
            due, self._pending = self._pending, []
            self._publish(name, due, complete=True)
        self._close_fd()
        self._writing = None
        self._walker = None

    def close(self, name: str | None, end: int) -> None:
        """At shutdown: what is committed of the newest file is written."""
        walker = self._walker
        if name is not None and name == self._writing and walker is not None:
            self.committed(name, end)
            if not self._pending and walker.clean_end == end and walker.clean_end > walker.span_start:
                self._publish(name, [walker.take()], False)
        self._close_fd()

    def forget(self, names: list[str]) -> None:
        """Purged files: their index goes too."""
        for name in names:
            self._known.pop(name, None)
            self._tails.pop(name, None)
            if self.writable:
                sidecar_path(self.data_dir, name).unlink(missing_ok=True)

    def _publish(self, name: str, spans: list[Span], complete: bool) -> None:
        known = self._known.setdefault(name, FileSpans([]))
        known.spans.extend(spans)
        known.complete = complete
        if self.writable and (spans or complete):
            self._append(name, spans, complete)

    # ------------------------------------------------------------------ the sidecar files

    def _rewrite(self, name: str, spans: list[Span], complete: bool) -> None:
        self._close_fd_of(name)
        path = sidecar_path(self.data_dir, name)
        try:
            make_durable_dir(path.parent)
            # A closed file's index is flushed once: after a power cut the closed files need no walk.
            atomic_write(path, _header(name) + _lines(spans, complete), sync=complete)
        except OSError as exc:  # the index is a cache: a full disk must not stop ingest for it
            log.warning("history index %s not written: %s", path, exc)

    def _append(self, name: str, spans: list[Span], complete: bool) -> None:
        data = _lines(spans, complete, self._known[name].spans)
        try:
            if self._fd is None or name != self._writing:
                self._close_fd()
                path = sidecar_path(self.data_dir, name)
                if not path.exists():
                    self._rewrite(name, self._known[name].spans[: -len(spans) or None], False)
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            os.write(self._fd, data)
            if complete:  # flushed once, when the file is closed (see _rewrite), with its name
                os.fdatasync(self._fd)
                fsync_dir(sidecar_path(self.data_dir, name).parent)
        except OSError as exc:
            log.warning("history index of %s not written: %s", name, exc)
            self._close_fd()
        if complete or name != self._writing:
            self._close_fd()

    def _close_fd_of(self, name: str) -> None:
        if name == self._writing:
            self._close_fd()

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _line(raw: dict[str, Any]) -> bytes:
    text = json.dumps(raw, separators=(",", ":")).encode()
    return text + b"\t%08x\n" % ev.crc32(text)


def _header(name: str) -> bytes:
    return _line({"binlog_history_index": FORMAT, "file": name})


def _lines(spans: list[Span], complete: bool, known: list[Span] | None = None) -> bytes:
    """The lines of ``spans``; with ``complete`` the closing line, the whole file being ``known``."""
    lines = [_line(span_to_json(span)) for span in spans]
    whole = known if known is not None else spans
    if complete and whole:
        lines.append(_line({"complete": whole[-1].end, "file": span_to_json(merge_spans(whole))}))
    return b"".join(lines)


def _parse_line(line: bytes) -> Any:
    """The JSON of one sidecar line; ValueError if its CRC32 does not match."""
    text, tab, crc = line.rpartition(b"\t")
    if not tab or len(crc) != 8 or int(crc, 16) != ev.crc32(text):
        raise ValueError("not a whole line of the index")
    return json.loads(text)


def _parse_sidecar(lines: list[bytes], name: str) -> tuple[list[Span], bool]:
    """The spans of a sidecar up to its first line that is not one (a torn tail), and whether it
    says the file is complete (right after its last span)."""
    spans: list[Span] = []
    try:
        header = _parse_line(lines[0])
        if header != {"binlog_history_index": FORMAT, "file": name}:
            return [], False
    except (ValueError, IndexError):
        return [], False
    for line in lines[1:]:
        try:
            raw = _parse_line(line)
            if "complete" in raw:
                return spans, bool(spans) and raw["complete"] == spans[-1].end
            spans.append(span_from_json(raw))
        except (ValueError, TypeError, KeyError, AttributeError):
            break
    return spans, False


def _read_summary(path: Path, size: int) -> Span | None:
    """The whole-file span on the last line of a sidecar, if it is there, whole, and for ``size``."""
    try:
        with open(path, "rb") as sidecar:
            sidecar.seek(0, os.SEEK_END)
            length = sidecar.tell()
            sidecar.seek(max(0, length - _SUMMARY_TAIL))
            tail = sidecar.read()
    except OSError:
        return None
    lines = tail.rstrip(b"\n").rsplit(b"\n", 1)
    try:
        raw = _parse_line(lines[-1])
        if raw.get("complete") != size:
            return None
        whole = span_from_json(raw["file"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return whole if whole.end == size else None


def _file_crc(stored: BinaryIO) -> bool:
    stored.seek(4)
    header = stored.read(ev.HEADER_LEN)
    if len(header) < ev.HEADER_LEN or header[4] != ev.FORMAT_DESCRIPTION_EVENT:
        return False
    length = int.from_bytes(header[9:13], "little")
    stored.seek(4)
    return checksum_of_fde(stored.read(min(length, 1 << 16)))


def _event_at(stored: BinaryIO, at: int, limit: int) -> bytes | None:
    """The event at ``at`` if one is there and ends by ``limit`` (its header, or all of it when small)."""
    stored.seek(at)
    header = stored.read(ev.HEADER_LEN)
    if len(header) < ev.HEADER_LEN:
        return None
    length = int.from_bytes(header[9:13], "little")
    log_pos = int.from_bytes(header[13:17], "little")
    if length < ev.HEADER_LEN or at + length > limit or (log_pos - length) & 0xFFFFFFFF != at & 0xFFFFFFFF:
        return None
    return header + stored.read(length - ev.HEADER_LEN) if length <= _CHECKED_CRC_MAX else header


def _matches_file(stored: BinaryIO, span: Span, crc: bool) -> bool:
    """The file agrees with what the span says of its last event and its last GTID."""
    if span.last_event_at < 0:
        return span.start == span.end and not span.groups
    last = _event_at(stored, span.last_event_at, span.end)
    if last is None or span.last_event_at + int.from_bytes(last[9:13], "little") != span.end:
        return False
    if crc and len(last) > ev.HEADER_LEN and not ev.checksum_matches(last):
        return False
    if not span.groups:
        return span.last_gtid_at is None
    if span.last_gtid_at is None:
        return False
    gtid_event = _event_at(stored, span.last_gtid_at, span.end)
    if gtid_event is None or gtid_event[4] not in _GTID_TYPES:
        return False
    expected = span.last_gtid
    if gtid_event[4] == ev.GTID_EVENT:
        if expected is None or len(gtid_event) < ev.HEADER_LEN + 12:
            return False
        seq_no = int.from_bytes(gtid_event[ev.HEADER_LEN : ev.HEADER_LEN + 8], "little")
        domain = int.from_bytes(gtid_event[ev.HEADER_LEN + 8 : ev.HEADER_LEN + 12], "little")
        return (domain, int.from_bytes(gtid_event[5:9], "little"), seq_no) == (
            expected.domain_id, expected.server_id, expected.seq_no)
    if gtid_event[4] == ev.ANONYMOUS_GTID_LOG_EVENT:
        return span.anonymous > 0
    mysql = gtid_of_event(gtid_event) if len(gtid_event) > ev.HEADER_LEN else None
    return span.mysql is not None and (mysql is None or mysql in span.mysql)


# ---------------------------------------------------------------------- walking a file


def build_spans(path: Path, start: int, end: int, interval: int) -> list[Span]:
    """The spans of [start, end) of a file (``start`` a clean point), every ``interval`` bytes
    or so and one to the end; a damaged event ends the walk (the spans stop before it)."""
    with open(path, "rb") as stored:
        crc = _file_crc(stored) if start > 4 else False
    walker = SpanWalker(start, crc)
    spans = _walk_into(walker, path, start, end, interval)
    if walker.clean_end > walker.span_start:
        spans.append(walker.take())
    return spans


def walk_file(path: Path, start: int, end: int) -> Span:
    """One span from ``start`` (a clean point) to the last clean point up to ``end``."""
    with open(path, "rb") as stored:
        crc = _file_crc(stored) if start > 4 else False
    walker = SpanWalker(start, crc)
    _walk_into(walker, path, start, end, None)
    return walker.take()


def _walk_into(walker: AnySpanWalker, path: Path, start: int, end: int, interval: int | None) -> list[Span]:
    """Walk [start, end) of the file with ``walker``, taking a span at the first clean point
    ``interval`` bytes past the last one (none when interval is None)."""
    return list(walk_spans(walker, path, start, end, interval))


def walk_spans(walker: AnySpanWalker, path: Path, start: int, end: int, interval: int | None) -> Iterator[Span]:
    """Walk [start, end) of the file with ``walker`` block by block, yielding a span at the first
    clean point ``interval`` bytes past the last one (none when interval is None; with 1, a
    span per group).  An event larger than a block is read whole; damage ends the walk."""
    with open(path, "rb") as stored:
        offset = start
        while offset + ev.HEADER_LEN <= end and not walker.broken:
            stored.seek(offset)
            block = memoryview(stored.read(min(_BUILD_BLOCK, end - offset)))
            pos = 0
            while used := walker.walk_events(block[pos:], len(block) - pos, interval or 0):
                pos += used
                if interval is not None and walker.clean_end - walker.span_start >= interval:
                    yield walker.take()
            if not pos:  # an event larger than the block, or damage
                length = int.from_bytes(block[9:13], "little") if len(block) >= ev.HEADER_LEN else 0
                if length < ev.HEADER_LEN or offset + length > end:
                    break
                stored.seek(offset)
                whole = stored.read(length)
                pos = walker.walk_events(whole, len(whole))
                if not pos:
                    break
                if interval is not None and walker.clean_end - walker.span_start >= interval:
                    yield walker.take()
            offset += pos
