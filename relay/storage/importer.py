"""``binlog-relay import``: seed or extend a data_dir from binlog files (backups, another binlog
server's copies, archived binlogs) so the relay serves them and the pipeline reads them.

Every event is checked as ingest checks what a primary sends (relay.replication.stream): the magic
number, a FORMAT_DESCRIPTION event first, the CRC32 when the file has checksums, and that each
event starts where the previous one ended (``log_pos - event_length``).  Across files: one
origin server per data_dir (the FORMAT_DESCRIPTION event's server_id, the writer ingest's
history check compares), names increasing with no gap (a ROTATE at the end of a file names the
next one; after a STOP or a crash the server takes the next number), and no file ending inside
an event group (a relay never stores one).

Files are stored as ingest stores them: byte for byte, except the FORMAT_DESCRIPTION event's
BINLOG_IN_USE flag of a copy of a file the server still had open, which is cleared as a primary's
dump clears it.

Nothing is half-written: the files are copied into a temporary directory inside data_dir and
checked there (so what is checked is what will be served), then renamed into place; the index,
written atomically after them, is the commit point, and the state file follows.  A failed import
removes its temporary directory and leaves the data_dir as it was.  The data_dir lock is held
throughout, so an import never runs beside a relay on the same data_dir.
"""

from __future__ import annotations

import filecmp
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from ..binlog import events as ev
from ..binlog import groups
from ..binlog.groups import GroupTracker
from .files import DataDirError, DataDirLock, first_difference, fsync_dir, make_durable_dir
from .history import HistoryIndex
from .index import read_index, valid_binlog_name, write_index
from .scan import iter_events
from .state import Checkpoint, read_state, write_state

try:
    from ..binlog._scan import check as _compiled_check
except ImportError:  # built without the C module: every event goes through the Python loop
    _compiled_check = None

_TMP_PREFIX = ".import-"
_NUMBERED = re.compile(r"^(.*)\.([0-9]+)$")
_U32 = 0xFFFFFFFF


class BinlogImportError(DataDirError):
    """An imported file failed a check; the message names the file and the position."""


@dataclass(frozen=True)
class CheckedFile:
    """What the checks learnt of one binlog file."""

    name: str
    size: int
    origin_server_id: int  # the FORMAT_DESCRIPTION event's server_id
    server_version: str
    next_file: str | None  # named by the ROTATE that ends it, if one does
    stopped: bool  # ends with a STOP event (the server shut down)
    last_group_end: int  # == size: a file never ends inside a group
    last_event_start: int  # start of the event ending at last_group_end


@dataclass(frozen=True)
class ImportResult:
    data_dir: Path
    imported: tuple[CheckedFile, ...]
    files: tuple[str, ...]  # the index after the import


def check_file(path: Path, name: str | None = None) -> CheckedFile:
    """Check every event of one binlog file; raise BinlogImportError naming file and position."""
    name = name or path.name
    size = path.stat().st_size
    with open(path, "rb") as stream:
        if stream.read(4) != ev.BINLOG_MAGIC:
            raise BinlogImportError(f"{name}: not a binlog file (bad magic number at position 0)")
        tracker = GroupTracker()
        fde: ev.FormatDescription | None = None
        origin = 0
        next_file: str | None = None
        stopped = False
        expected = 4
        group_end, last_start = 4, 4

        def pass_over(block: memoryview, pos: int, offset: int) -> int:
            """The events of transactions, checked in C (see groups.CHECK_KINDS)."""
            nonlocal expected, group_end, last_start
            if _compiled_check is None or fde is None or next_file or stopped:
                return pos
            passed, tracker.state, ended, last = _compiled_check(
                block, pos, len(block), offset, fde.checksum_alg == ev.CHECKSUM_CRC32, groups.CHECK_KINDS,
                tracker.state)
            if ended >= 0:
                group_end, last_start = ended, last
            expected += passed - pos
            return int(passed)

        for offset, event in iter_events(stream, 4, size, pass_over=pass_over):
            if offset != expected:  # iter_events never skips; kept as a guard on its contract
                raise BinlogImportError(f"{name}: event at position {offset}, expected one at {expected}")
            etype = event[4]
            length = len(event)
            log_pos = int.from_bytes(event[13:17], "little")
            if fde is None:
                if etype != ev.FORMAT_DESCRIPTION_EVENT:
                    raise BinlogImportError(f"{name}: the first event (position 4) is {ev.event_name(etype)}, "
                                       "not a FORMAT_DESCRIPTION event")
                try:
                    fde = ev.parse_format_description(event)
                except ev.BinlogFormatError as exc:
                    raise BinlogImportError(f"{name}: bad FORMAT_DESCRIPTION event at position 4: {exc}") from None
                origin = int.from_bytes(event[5:9], "little")
            elif etype == ev.FORMAT_DESCRIPTION_EVENT:
                # A second FDE is how a relay log (not a binlog) mixes two servers' events.
                raise BinlogImportError(f"{name}: a second FORMAT_DESCRIPTION event at position {offset}: "
                                   "this looks like a relay log, not a primary's binlog")
            if next_file is not None or stopped:
                raise BinlogImportError(f"{name}: event {ev.event_name(etype)} at position {offset} follows the "
                                   f"{'ROTATE' if next_file else 'STOP'} event that should end the file")
            if (log_pos - length) & _U32 != offset & _U32:
                raise BinlogImportError(
                    f"{name}: event {ev.event_name(etype)} at position {offset} (length {length}) says it "
                    f"ends at {log_pos}, not {offset + length}: not the file the server wrote (cut, "
                    "spliced, or a relay log)")
            if _crc_fails(etype, event, fde.checksum_alg):
                raise BinlogImportError(f"{name}: event {ev.event_name(etype)} at position {offset} (length {length}) "
                                   "failed its CRC32 check: the file is damaged")
            if etype == ev.ROTATE_EVENT:
                next_file = ev.parse_rotate(event, fde.checksum_alg == ev.CHECKSUM_CRC32).next_file
                next_file = _rotate_name(next_file)
            elif etype == ev.STOP_EVENT:
                stopped = True
            if tracker.ends_group(etype, event):
                group_end, last_start = offset + length, offset
            expected = offset + length
        if fde is None:
            raise BinlogImportError(f"{name}: no whole event after the magic number (position 4; file size {size})")
        if expected != size:
            stream.seek(expected)
            head = stream.read(ev.HEADER_LEN)
            need = int.from_bytes(head[9:13], "little") if len(head) >= 13 else None
            what = (f"an event of {need} bytes starts there" if need and need >= ev.HEADER_LEN
                    else "no event header can start there")
            raise BinlogImportError(f"{name}: truncated or damaged at position {expected}: {what}, but the file "
                               f"ends at {size}")
        if group_end != size:
            raise BinlogImportError(f"{name}: ends inside an event group (the last one starts after position "
                               f"{group_end}, the file ends at {size}): copy the file again once the "
                               "server has finished writing it")
    return CheckedFile(name, size, origin, fde.server_version, next_file, stopped, group_end, last_start)


def _crc_fails(etype: int, event: memoryview, checksum_alg: int) -> bool:
    if etype == ev.FORMAT_DESCRIPTION_EVENT:
        # The FDE says itself whether it has a CRC; it is computed with BINLOG_IN_USE cleared.
        return event[-5] == ev.CHECKSUM_CRC32 and not ev.checksum_matches(event)
    return checksum_alg == ev.CHECKSUM_CRC32 and ev.crc32(event) != ev.CRC32_RESIDUE


def _rotate_name(raw: str) -> str:
    # MariaDB 10.5 may leave bytes after the name in a ROTATE's body (seen in the fixtures);
    # the name itself never holds a NUL.
    return raw.split("\x00", 1)[0]


def _successor(name: str) -> str | None:
    """The name a server gives the file after ``name`` when no ROTATE names it (after a STOP
    or a crash): the same base, the number plus one, as wide as before."""
    m = _NUMBERED.match(name)
    if not m:
        return None
    number = m.group(2)
    return f"{m.group(1)}.{int(number) + 1:0{len(number)}d}"


def _follows(previous: CheckedFile, name: str) -> bool:
    if previous.next_file is not None:
        return name == previous.next_file
    return name == _successor(previous.name)


def import_binlogs(data_dir: Path | str, sources: list[Path | str]) -> ImportResult:
    """Import ``sources`` (in order) into ``data_dir``; see the module docstring."""
    data_dir = Path(data_dir)
    paths = [Path(p) for p in sources]
    if not paths:
        raise BinlogImportError("no binlog files to import")
    for path in paths:
        if not path.is_file():
            raise BinlogImportError(f"{path}: no such file")
        if not valid_binlog_name(path.name):
            raise BinlogImportError(f"{path.name}: not a binlog file name (base name, a dot, a number of "
                               "6 digits or more, as the server names them)")
    names = [p.name for p in paths]
    if len(set(names)) != len(names):
        raise BinlogImportError("the same file name is given twice: " + ", ".join(sorted({n for n in names
                                                                                      if names.count(n) > 1})))
    created = not data_dir.exists()
    make_durable_dir(data_dir)
    lock_existed = (data_dir / "relay.lock").exists()
    lock = DataDirLock(data_dir)
    tmp: Path | None = None
    try:
        lock.acquire()
        stored = read_index(data_dir)
        state = read_state(data_dir)
        if state.own_files_from is not None:
            raise BinlogImportError(f"{data_dir} holds files of the relay's own after a switch of primary "
                               f"(from {state.own_files_from}): importing a primary's files after them "
                               "would mix two histories")
        _remove_leftovers(data_dir)
        tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=data_dir))
        checked: list[CheckedFile] = []
        for path in paths:
            copy = tmp / path.name
            _copy(path, copy)
            checked.append(check_file(copy, path.name))
            _clear_in_use_flag(copy)
        completes = _check_sequence(data_dir, tmp, stored, state.upstream_server_id, checked)
        for path in paths[1:] if completes else paths:
            existing = data_dir / path.name
            if existing.exists() and not filecmp.cmp(existing, tmp / path.name, shallow=False):
                raise BinlogImportError(f"{existing} exists but is not listed in {data_dir / 'binlog.index'}; "
                                        "move it away first")
        # Commit: files into place, then the index (the commit point), then the state.
        for path in paths:
            os.replace(tmp / path.name, data_dir / path.name)
        fsync_dir(data_dir)
        files = stored + (names[1:] if completes else names)
        write_index(data_dir, files)
        last = checked[-1]
        write_state(data_dir, replace(
            state, upstream_server_id=last.origin_server_id,
            upstream_version=state.upstream_version if stored else last.server_version,
            checkpoint=Checkpoint(last.name, last.last_group_end, last.last_event_start)))
        history = HistoryIndex(data_dir, lambda: files, lambda name: os.stat(data_dir / name).st_size)
        for name in dict.fromkeys(stored[-1:] + names):  # the newest stored file is closed now
            history.rebuild(name)
        return ImportResult(data_dir, tuple(checked), tuple(files))
    except BaseException:
        if created:
            shutil.rmtree(data_dir, ignore_errors=True)
        elif not lock_existed:
            (data_dir / "relay.lock").unlink(missing_ok=True)
        raise
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        lock.release()


def _check_sequence(data_dir: Path, tmp: Path, stored: list[str], state_origin: int | None,
                    checked: list[CheckedFile]) -> bool:
    """One origin, names in order, no gap: within the import and after the stored files.
    True when the first imported file is a longer copy of the stored last one, to replace it."""
    first = checked[0]
    origin = state_origin
    completes = False
    if stored:
        last_name = stored[-1]
        last_path = data_dir / last_name
        if first.name == last_name:
            # The relay's last file, which it stopped storing before the server closed it: a
            # complete copy replaces it, if the stored bytes are a prefix of it.
            size = last_path.stat().st_size
            differs = first_difference(last_path, tmp / first.name, active=True)
            if differs is not None and not (differs == size and first.size >= size):
                raise BinlogImportError(
                    f"{first.name} differs from the stored copy at position {differs}: not the same server's "
                    f"file, refusing to mix two histories")
            completes = True
        elif first.name in stored:
            raise BinlogImportError(f"{first.name} is already in {data_dir}; import only the files after "
                                    f"{last_name}")
        else:
            try:
                previous = check_file(last_path)
            except BinlogImportError as exc:
                raise BinlogImportError(f"the stored {exc}") from None
            if previous.next_file is None and not previous.stopped:
                raise BinlogImportError(
                    f"the stored {last_name} is not closed (no ROTATE or STOP event at its end, position "
                    f"{previous.size}): the server may have written more to it; import a complete copy of "
                    f"{last_name} first (with the files after it), or let the relay finish it from the primary")
            if not _follows(previous, first.name):
                raise BinlogImportError(
                    f"{first.name} does not follow the stored {last_name}: the next file is "
                    f"{previous.next_file or _successor(last_name)} ({_why_next(previous)})")
            origin = previous.origin_server_id if origin is None else origin
    if origin is not None and first.origin_server_id != origin:
        raise BinlogImportError(f"{first.name} was written by server_id {first.origin_server_id} "
                                f"(its FORMAT_DESCRIPTION event at position 4), but {data_dir} holds the history "
                                f"of server_id {origin}: one data_dir holds one server's binlogs")
    for previous, current in zip(checked, checked[1:]):
        if current.origin_server_id != previous.origin_server_id:
            raise BinlogImportError(
                f"{current.name} was written by server_id {current.origin_server_id} (its FORMAT_DESCRIPTION event "
                f"at position 4), {previous.name} by server_id {previous.origin_server_id}: one data_dir holds one "
                "server's binlogs")
        if not _follows(previous, current.name):
            expected = previous.next_file or _successor(previous.name)
            if expected and current.name > expected:
                problem = f"{expected} is missing"
            else:
                problem = "the files are out of order"
            raise BinlogImportError(f"{current.name} does not follow {previous.name}: the next file is {expected} "
                                    f"({_why_next(previous)}); {problem}")
    return completes


def _why_next(previous: CheckedFile) -> str:
    if previous.next_file is not None:
        return f"the ROTATE event at the end of {previous.name} names it"
    return f"{previous.name} ends without a ROTATE event, so the server took the next number"


def _remove_leftovers(data_dir: Path) -> None:
    # An import killed half-way leaves its temporary directory; the lock says none is running.
    for entry in data_dir.iterdir():
        if entry.name.startswith(_TMP_PREFIX) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)


def _clear_in_use_flag(path: Path) -> None:
    """Store the FDE as ingest stores it: a primary's dump sends its FDE with BINLOG_IN_USE
    cleared (and clears it on disk when it closes the file), so a relay's files never have it.
    A copy of the primary's open file has it set; the FDE's CRC is computed without it."""
    offset = len(ev.BINLOG_MAGIC) + ev.FLAGS_OFFSET
    with open(path, "r+b") as stream:
        stream.seek(offset)
        flags = stream.read(1)
        if flags and flags[0] & ev.LOG_EVENT_BINLOG_IN_USE_F:
            stream.seek(offset)
            stream.write(bytes([flags[0] & ~ev.LOG_EVENT_BINLOG_IN_USE_F & 0xFF]))
            stream.flush()
            os.fsync(stream.fileno())


def _copy(source: Path, target: Path) -> None:
    with open(source, "rb") as src, open(target, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
        out.flush()
        os.fsync(out.fileno())


__all__ = ["CheckedFile", "BinlogImportError", "ImportResult", "check_file", "import_binlogs"]
