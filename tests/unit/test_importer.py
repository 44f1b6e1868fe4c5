"""`binlog-relay import` (relay.storage.importer): binlog files written by MySQL 8.0-9.6
(tests/fixtures/mysql) and MariaDB 10.11 (tests/fixtures/wire, tests/fixtures/rows) seed a data_dir
that RelayLog opens as ingest left it; damaged copies of the same files (a flipped byte, a cut
tail, a missing file, files out of order, two servers' files) are refused with the file and the
position, and the data_dir is left exactly as it was."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from relay.storage.files import DataDirError
from relay.storage.importer import BinlogImportError, check_file, import_binlogs
from relay.storage.index import read_index
from relay.storage.relaylog import RelayLog
from relay.storage.state import read_state
from tests.support.binlogs import file_events

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
MYSQL = FIXTURES / "mysql"
MARIADB = FIXTURES / "wire" / "mariadb-10.11-mixed.000001"  # MariaDB 10.11, server_id 7
MARIADB_ROWS = FIXTURES / "rows"

# time_issue's ROTATE names binlog.000005 and minimal_row_metadata's binlog.000021, both MySQL
# 8.0.40 with server_id 1: renamed copies make a chain binlog.000004 -> binlog.000005.
CHAIN = {"binlog.000004": MYSQL / "time_issue.000001", "binlog.000005": MYSQL / "minimal_row_metadata.000001"}


def chain(tmp_path: Path) -> dict[str, Path]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    out = {}
    for name, origin in CHAIN.items():
        shutil.copy(origin, src / name)
        out[name] = src / name
    return out


def snapshot(data_dir: Path) -> dict[str, bytes] | None:
    """Every file of data_dir with its bytes (None: data_dir does not exist)."""
    if not data_dir.exists():
        return None
    return {str(p.relative_to(data_dir)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(data_dir.rglob("*"))}


def refused(data_dir: Path, files: list[Path], *fragments: str) -> str:
    before = snapshot(data_dir)
    with pytest.raises(DataDirError) as err:  # BinlogImportError, or the lock's
        import_binlogs(data_dir, files)
    message = str(err.value)
    assert isinstance(err.value, BinlogImportError) or "in use by another" in message
    for fragment in fragments:
        assert fragment in message
    assert snapshot(data_dir) == before, "a refused import changed the data_dir"
    return message


def same_as_ingest_stores(stored: Path, original: Path) -> bool:
    """The original's bytes, with the FDE's BINLOG_IN_USE flag cleared as a primary's dump clears it
    (a copy of a file the server had open has it set); the FDE's CRC32 still matches."""
    data, expected = stored.read_bytes(), bytearray(original.read_bytes())
    expected[4 + 17] &= 0xFE
    fde = file_events(data)[0][1]
    return data == bytes(expected) and zlib.crc32(fde[:-4]) == int.from_bytes(fde[-4:], "little")


def damaged(tmp_path: Path, origin: Path, name: str, edit) -> Path:
    data = bytearray(origin.read_bytes())
    edit(data)
    path = tmp_path / "damaged" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(bytes(data))
    return path


# --------------------------------------------------------------------------- imports that succeed

MYSQL_FILES = ["binlog-invisible-columns.000001", "binlog_transaction_previous_GTID_no_tag.000001",
               "binlog_transaction_with_GTID_TAG.000001", "json.binlog.000001", "minimal_row_metadata.000001",
               "mysql-enum-string-set.000001", "mysql_type_bit.000001", "time_issue.000001",
               "transaction_compression.000001"]


@pytest.mark.parametrize("name", MYSQL_FILES)
def test_a_mysql_file_seeds_a_data_dir_that_the_relay_log_opens(tmp_path, name):
    data_dir = tmp_path / "data"
    result = import_binlogs(data_dir, [MYSQL / name])
    assert same_as_ingest_stores(data_dir / name, MYSQL / name)
    assert read_index(data_dir) == [name]
    assert (data_dir / "binlog.index").read_text() == f"./{name}\n"
    events = file_events((MYSQL / name).read_bytes())
    fde = events[0][1]
    state = read_state(data_dir)
    assert state.upstream_server_id == int.from_bytes(fde[5:9], "little")
    assert state.upstream_version == fde[21:71].split(b"\0")[0].decode()
    last_offset, last = events[-1]
    assert (state.checkpoint.file, state.checkpoint.position, state.checkpoint.last_event_start) == (
        name, last_offset + len(last), last_offset)
    assert result.files == (name,)
    assert not [p for p in data_dir.iterdir() if p.name.startswith(".import-")]
    # The relay opens it as a data_dir ingest wrote: nothing cut, the resume point at the end.
    log = RelayLog(data_dir, sync="none")
    log.open()
    try:
        assert log.committed == (name, (MYSQL / name).stat().st_size)
        resume = log.resume_point()
        assert (resume.file, resume.position, resume.last_event) == (name, last_offset + len(last), bytes(last))
        assert resume.origin_server_id == state.upstream_server_id
    finally:
        log.close()
    assert same_as_ingest_stores(data_dir / name, MYSQL / name)


def test_mariadb_files_import_too(tmp_path):
    data_dir = tmp_path / "data"
    import_binlogs(data_dir, [MARIADB])
    state = read_state(data_dir)
    assert state.upstream_server_id == 7 and "MariaDB" in state.upstream_version
    for variant in ("full", "minimal", "noblob", "compressed"):
        copy = tmp_path / "rows" / f"{variant}-bin.000001"
        copy.parent.mkdir(exist_ok=True)
        shutil.copy(MARIADB_ROWS / f"{variant}.binlog", copy)
        checked = check_file(copy)
        assert checked.size == copy.stat().st_size and "MariaDB" in checked.server_version


def test_a_chain_imports_at_once_or_one_file_after_the_other(tmp_path):
    files = chain(tmp_path)
    at_once = tmp_path / "at_once"
    import_binlogs(at_once, list(files.values()))
    assert read_index(at_once) == ["binlog.000004", "binlog.000005"]
    assert read_state(at_once).checkpoint.file == "binlog.000005"
    one_by_one = tmp_path / "one_by_one"
    import_binlogs(one_by_one, [files["binlog.000004"]])
    import_binlogs(one_by_one, [files["binlog.000005"]])
    assert snapshot(one_by_one) == snapshot(at_once)


def test_the_cli_imports_and_refuses(tmp_path):
    files = chain(tmp_path)
    data_dir = tmp_path / "data"
    ok = subprocess.run([sys.executable, "-m", "relay.cli", "import", "--data-dir", str(data_dir),
                         *map(str, files.values())], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "imported 2 file(s)" in ok.stdout
    again = subprocess.run([sys.executable, "-m", "relay.cli", "import", "--data-dir", str(data_dir),
                            str(files["binlog.000004"])], capture_output=True, text=True)
    assert again.returncode == 1
    assert "binlog.000004 is already in" in again.stderr and "nothing was imported" in again.stderr


# --------------------------------------------------------------------------- refusals

def test_a_flipped_byte_is_refused_by_its_crc32(tmp_path):
    origin = MYSQL / "mysql-enum-string-set.000001"
    offset, event = file_events(origin.read_bytes())[9]  # the insert's WRITE_ROWS event
    path = damaged(tmp_path, origin, origin.name, lambda d: d.__setitem__(offset + 40, d[offset + 40] ^ 0x10))
    refused(tmp_path / "data", [path], f"{origin.name}: event write_rows at position {offset}",
            "failed its CRC32 check")


def test_a_cut_tail_is_refused(tmp_path):
    origin = MYSQL / "json.binlog.000001"
    offset, event = file_events(origin.read_bytes())[-1]
    path = damaged(tmp_path, origin, origin.name, lambda d: d.__delitem__(slice(len(d) - 7, None)))
    refused(tmp_path / "data", [path], f"truncated or damaged at position {offset}",
            f"an event of {len(event)} bytes starts there", f"ends at {origin.stat().st_size - 7}")


def test_a_file_ending_inside_a_group_is_refused(tmp_path):
    origin = MYSQL / "mysql_type_bit.000001"
    events = file_events(origin.read_bytes())
    xid_offset = events[-1][0]  # cut the XID: whole events, but the transaction is open
    path = damaged(tmp_path, origin, origin.name, lambda d: d.__delitem__(slice(xid_offset, None)))
    refused(tmp_path / "data", [path], "ends inside an event group")


def test_a_bad_magic_number_is_refused(tmp_path):
    path = damaged(tmp_path, MYSQL / "time_issue.000001", "binlog.000001", lambda d: d.__setitem__(0, 0))
    refused(tmp_path / "data", [path], "binlog.000001: not a binlog file (bad magic number at position 0)")


def test_a_relay_log_is_refused_for_its_positions(tmp_path):
    # A MySQL relay log: the primary's ROTATE (log_pos 0) and its events at the primary's offsets.
    refused(tmp_path / "data", [MYSQL / "rpl_unfiltered_hidden_gcol.000001"],
            "rpl_unfiltered_hidden_gcol.000001: event rotate at position 155 (length 48) says it ends at 0, not 203")


def test_a_gap_is_refused(tmp_path):
    files = chain(tmp_path)
    gap = tmp_path / "src" / "binlog.000006"
    shutil.copy(files["binlog.000005"], gap)
    refused(tmp_path / "data", [files["binlog.000004"], gap],
            "binlog.000006 does not follow binlog.000004: the next file is binlog.000005",
            "ROTATE event at the end of binlog.000004 names it", "binlog.000005 is missing")
    data_dir = tmp_path / "extended"
    import_binlogs(data_dir, [files["binlog.000004"]])
    refused(data_dir, [gap], "binlog.000006 does not follow the stored binlog.000004")


def test_files_out_of_order_are_refused(tmp_path):
    files = chain(tmp_path)
    refused(tmp_path / "data", [files["binlog.000005"], files["binlog.000004"]],
            "binlog.000004 does not follow binlog.000005", "the files are out of order")


def test_two_origin_servers_are_refused(tmp_path):
    files = chain(tmp_path)
    mariadb = tmp_path / "src" / "binlog.000005"
    shutil.copy(MARIADB, mariadb)  # the right name after binlog.000004, another server's bytes
    refused(tmp_path / "data", [files["binlog.000004"], mariadb],
            "binlog.000005 was written by server_id 7", "binlog.000004 by server_id 1")
    data_dir = tmp_path / "extended"
    import_binlogs(data_dir, [files["binlog.000004"]])
    refused(data_dir, [mariadb], "binlog.000005 was written by server_id 7",
            f"{data_dir} holds the history of server_id 1")
    # The recorded primary counts too, even with no file stored any more.
    empty = tmp_path / "recorded"
    empty.mkdir()
    (empty / "relay-state.json").write_text(json.dumps({"version": 1, "upstream_server_id": 7}))
    refused(empty, [files["binlog.000004"]], "binlog.000004 was written by server_id 1",
            "holds the history of server_id 7")


def test_a_refused_import_into_a_new_data_dir_leaves_nothing(tmp_path):
    path = damaged(tmp_path, MYSQL / "time_issue.000001", "binlog.000004", lambda d: d.__setitem__(300, d[300] ^ 1))
    data_dir = tmp_path / "new"
    refused(data_dir, [path], "binlog.000004: event")
    assert not data_dir.exists()


def test_an_import_does_not_run_beside_a_relay(tmp_path):
    data_dir = tmp_path / "data"
    log = RelayLog(data_dir, sync="none")
    log.open()
    try:
        refused(data_dir, [MYSQL / "time_issue.000001"], "in use by another binlog-relay process")
    finally:
        log.close()


# --------------------------------------------------------------------------- extending a relay's data_dir

def test_a_complete_copy_replaces_the_stored_unfinished_last_file(tmp_path):
    """The relay stopped while the primary's file was open: it holds a prefix (ending at a group
    end); the complete file, imported with the next ones, replaces it."""
    origin = MYSQL / "mysql-enum-string-set.000001"
    events = file_events(origin.read_bytes())
    first_xid = next(i for i, (_, e) in enumerate(events) if e[4] == 16)
    cut = events[first_xid][0] + len(events[first_xid][1])
    data_dir = tmp_path / "data"
    prefix = damaged(tmp_path, origin, origin.name, lambda d: d.__delitem__(slice(cut, None)))
    import_binlogs(data_dir, [prefix])
    assert read_state(data_dir).checkpoint.position == cut
    # nothing may follow a file that is not closed: the server may have written more to it
    refused(data_dir, [MYSQL / "time_issue.000001"], f"the stored {origin.name} is not closed",
            f"position {cut}")
    import_binlogs(data_dir, [origin])
    assert read_index(data_dir) == [origin.name]
    assert same_as_ingest_stores(data_dir / origin.name, origin)
    assert read_state(data_dir).checkpoint.position == origin.stat().st_size


def test_another_file_of_the_same_name_does_not_replace_the_stored_one(tmp_path):
    data_dir = tmp_path / "data"
    import_binlogs(data_dir, [MYSQL / "time_issue.000001"])
    other = tmp_path / "other" / "time_issue.000001"
    other.parent.mkdir()
    shutil.copy(MYSQL / "minimal_row_metadata.000001", other)  # same server_id, other bytes
    refused(data_dir, [other], "time_issue.000001 differs from the stored copy at position",
            "refusing to mix two histories")


# --------------------------------------------------------------------------- the C loop's share

def _python_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import relay.storage.importer as importer
    monkeypatch.setattr(importer, "_compiled_check", None)


CHECKED_FILES = [MYSQL / name for name in MYSQL_FILES] + [MARIADB, *sorted(MARIADB_ROWS.glob("*.binlog"))]


@pytest.mark.parametrize("path", CHECKED_FILES, ids=lambda path: path.name)
def test_the_c_loop_and_the_python_loop_learn_the_same(path, monkeypatch):
    import relay.storage.importer as importer
    assert importer._compiled_check is not None, "the C module is not built (python3 setup.py build_ext --inplace)"
    with_c = check_file(path)
    _python_only(monkeypatch)
    assert check_file(path) == with_c


def test_the_c_loop_walks_whole_transactions() -> None:
    """From a MariaDB GTID through its rows events to the XID, and on into the next transaction:
    the C loop keeps the group state and says where the group ended; it stops at a query."""
    import relay.storage.importer as importer
    from relay.binlog import events as ev
    from relay.binlog import groups

    data = MARIADB.read_bytes()
    events = file_events(data)
    names = [ev.event_name(event[4]) for _, event in events]
    first = names.index("xid") - 4  # its GTID: gtid, annotate_rows, table_map, write_rows, xid
    assert names[first:first + 6] == ["mariadb_gtid", "annotate_rows", "table_map", "write_rows_v1", "xid",
                                      "mariadb_gtid"]
    start = events[first][0]
    xid_at, xid = events[first + 4]
    stop_at = events[first + 9][0]  # the next transaction's COMMIT query (after gtid, annotate, map, rows)
    assert names[first + 9] == "query"
    passed, state, group_end, group_last = importer._compiled_check(
        memoryview(data), start, len(data), start, True, groups.CHECK_KINDS, groups._OUTSIDE)
    assert (passed, group_end, group_last) == (stop_at, xid_at + len(xid), xid_at)
    assert state == groups._IN_TRANSACTION  # inside the next transaction


@pytest.mark.parametrize("python_only", [False, True], ids=["C", "Python"])
def test_an_event_inside_a_group_at_the_wrong_position_is_refused(tmp_path, monkeypatch, python_only):
    if python_only:
        _python_only(monkeypatch)
    origin = MYSQL / "mysql-enum-string-set.000001"
    offset, event = file_events(origin.read_bytes())[9]  # the insert's WRITE_ROWS event, inside its group

    def wrong_end(data: bytearray) -> None:  # log_pos one byte on, the CRC32 made good again
        end = int.from_bytes(data[offset + 13:offset + 17], "little") + 1
        data[offset + 13:offset + 17] = end.to_bytes(4, "little")
        body = bytes(data[offset:offset + len(event) - 4])
        data[offset + len(event) - 4:offset + len(event)] = zlib.crc32(body).to_bytes(4, "little")

    path = damaged(tmp_path, origin, origin.name, wrong_end)
    refused(tmp_path / "data", [path], f"event write_rows at position {offset} (length {len(event)}) says it ends "
                                       f"at {offset + len(event) + 1}")
