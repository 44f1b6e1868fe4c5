"""The power-cut file system of the tests (tests/support/powercut.py) against its rules, before
any relay runs on it: after a cut, a file has its last synced content and length, a directory its
last synced entries, and nothing the page cache held of the lost writes is read."""

from __future__ import annotations

import fcntl
import mmap
import os
from pathlib import Path

import pytest

from relay.storage.files import atomic_write, fsync_dir, make_durable_dir
from tests.support.powercut import PowerCutMount


@pytest.fixture
def fs(tmp_path):  # type: ignore[no-untyped-def]
    with PowerCutMount(tmp_path / "mnt", tmp_path) as mount:
        yield mount


def _write(path: Path, data: bytes, *, sync: bool, flags: int = os.O_WRONLY | os.O_CREAT) -> None:
    fd = os.open(path, flags, 0o640)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def test_a_file_never_synced_with_its_directory_is_gone(fs):
    root = fs.mountpoint
    _write(root / "first", b"written and synced, then the directory synced", sync=True)
    _write(root / "second", b"", sync=False)
    fsync_dir(root)
    _write(root / "late", b"created after the directory's sync", sync=True)
    fs.cut()
    assert sorted(os.listdir(root)) == ["first", "second"]  # "late": its name was never synced
    assert (root / "first").read_bytes() == b"written and synced, then the directory synced"


def test_writes_since_the_last_fsync_are_lost(fs):
    root = fs.mountpoint
    path = root / "binlog"
    _write(path, b"A" * 100, sync=True)
    fsync_dir(root)
    _write(path, b"B" * 50, sync=False, flags=os.O_WRONLY | os.O_APPEND)  # an append
    fd = os.open(path, os.O_RDWR)
    os.pwrite(fd, b"C" * 10, 20)  # an overwrite inside the synced part
    os.close(fd)
    assert path.read_bytes() == b"A" * 20 + b"C" * 10 + b"A" * 70 + b"B" * 50
    fs.cut()
    assert path.read_bytes() == b"A" * 100


def test_fdatasync_makes_data_durable(fs):
    root = fs.mountpoint
    path = root / "binlog"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o640)
    os.write(fd, b"x" * 10)
    os.fsync(fd)
    fsync_dir(root)
    os.write(fd, b"y" * 10)
    os.fdatasync(fd)
    os.write(fd, b"z" * 10)
    os.close(fd)
    fs.cut()
    assert path.read_bytes() == b"x" * 10 + b"y" * 10


def test_a_truncation_not_synced_is_undone(fs):
    root = fs.mountpoint
    path = root / "binlog"
    _write(path, bytes(range(200)), sync=True)
    fsync_dir(root)
    fd = os.open(path, os.O_RDWR)
    os.ftruncate(fd, 50)
    os.write(fd, b"after the cut back")
    os.close(fd)
    fs.cut()
    assert path.read_bytes() == bytes(range(200))


def test_a_rename_over_a_file_is_undone_until_the_directory_is_synced(fs):
    root = fs.mountpoint
    state = root / "relay-state.json"
    _write(state, b"old state", sync=True)
    fsync_dir(root)
    _write(root / "relay-state.json.tmp", b"new state", sync=True)
    os.replace(root / "relay-state.json.tmp", state)
    assert state.read_bytes() == b"new state"
    fs.cut()
    assert state.read_bytes() == b"old state"
    assert sorted(os.listdir(root)) == ["relay-state.json"]
    _write(root / "relay-state.json.tmp", b"newer state", sync=True)
    os.replace(root / "relay-state.json.tmp", state)
    fsync_dir(root)
    fs.cut()
    assert state.read_bytes() == b"newer state"


def test_an_unlink_or_a_directory_not_synced_is_undone(fs):
    root = fs.mountpoint
    _write(root / "purged", b"kept until the directory is synced", sync=True)
    fsync_dir(root)
    (root / "purged").unlink()
    (root / "sub").mkdir()
    _write(root / "sub" / "file", b"in a new directory", sync=True)
    fsync_dir(root / "sub")
    fs.cut()
    assert sorted(os.listdir(root)) == ["purged"]
    assert (root / "purged").read_bytes() == b"kept until the directory is synced"


def test_a_mapping_and_a_lock_work_and_the_cache_is_dropped_at_a_cut(fs):
    root = fs.mountpoint
    path = root / "binlog"
    _write(path, b"durable" * 1000, sync=True)
    fsync_dir(root)
    _write(path, b"lost" * 1000, sync=False, flags=os.O_WRONLY | os.O_APPEND)
    with open(path, "rb") as stored, mmap.mmap(stored.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert mapped[-4:] == b"lost"  # read through the page cache
    with open(root / "relay.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(lock, fcntl.LOCK_UN)
    fs.cut()
    assert path.stat().st_size == 7000
    with open(path, "rb") as stored, mmap.mmap(stored.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        assert mapped[:] == b"durable" * 1000
    counts = fs.counts()
    assert counts["cuts"] == 1 and counts["lost_bytes"] == 4000 and counts["fsync"] >= 1


def test_an_armed_cut_freezes_the_writer_right_after_the_operation(fs):
    """Aimed at the moment between the rename of a state file and the fsync of its directory:
    the writer never gets past the rename, and the cut undoes it."""
    import subprocess
    import sys
    import textwrap

    from relay.sandbox.polling import wait_for

    root = fs.mountpoint
    _write(root / "state", b"old", sync=True)
    fsync_dir(root)
    fs.arm("rename", "/state")
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os
        fd = os.open({str(root / 'state.tmp')!r}, os.O_WRONLY | os.O_CREAT, 0o640)
        os.write(fd, b"new"); os.fsync(fd); os.close(fd)
        os.replace({str(root / 'state.tmp')!r}, {str(root / 'state')!r})
        dir_fd = os.open({str(root)!r}, os.O_RDONLY | os.O_DIRECTORY); os.fsync(dir_fd)
        open({str(root / 'done')!r}, "w").close()
        """)])
    try:
        wait_for(lambda: fs.tripped() is not None, 10, "the rename was not seen")
        assert fs.tripped() == "rename /state"
        writer.kill()  # it dies once the cut aborts the request it waits for
        fs.cut()
        writer.wait(10)
    finally:
        if writer.poll() is None:
            writer.kill()
    assert sorted(os.listdir(root)) == ["state"] and (root / "state").read_bytes() == b"old"


def test_the_relays_new_directories_survive_a_cut_where_mkdir_alone_does_not(fs):
    """relay.storage.files.make_durable_dir against plain mkdir: a data_dir (or its history-index/)
    created and filled, each file synced with its directory, vanishes if its parent never saw a sync."""
    root = fs.mountpoint
    fsync_dir(root)
    for make, survives in ((lambda d: d.mkdir(parents=True), False), (make_durable_dir, True)):
        directory = root / "made" / "data"
        make(directory)
        _write(directory / "binlog.index", b"./mysql-bin.000001\n", sync=True)
        fsync_dir(directory)
        fs.cut()
        assert (directory / "binlog.index").exists() is survives
        if survives:
            assert (directory / "binlog.index").read_bytes() == b"./mysql-bin.000001\n"


@pytest.mark.parametrize("sync", [True, False])
def test_atomic_write_keeps_the_old_or_the_new_content(fs, sync):
    root = fs.mountpoint
    path = root / "relay-state.json"
    atomic_write(path, b'{"old": 1}')
    atomic_write(path, b'{"new": 2}', sync=sync)
    fs.cut()
    assert path.read_bytes() == (b'{"new": 2}' if sync else b'{"old": 1}')


def test_a_closed_files_index_survives_a_cut(fs):
    """Once ingest closed a file (the next one began), its history index is on disk with its name:
    a cut does not send the relay walking every closed file again at start."""
    from relay.binlog.groups import GroupTracker
    from relay.replication.stream import Segment
    from relay.storage.history import sidecar_path
    from relay.storage.relaylog import RelayLog
    from tests.support.binlogs import MARIADB_MIXED_BINLOG, file_events

    binlog = MARIADB_MIXED_BINLOG.read_bytes()
    events = file_events(binlog)
    tracker = GroupTracker()
    ends = [(offset, offset + len(event)) for offset, event in events if tracker.ends_group(event[4], event)]

    def whole(name: str) -> Segment:
        return Segment(name, 4, [memoryview(e) for _, e in events], len(binlog) - 4, ends[-1][1], ends[-1][0],
                       new_file=True)

    data_dir = fs.mountpoint / "data"
    relay_log = RelayLog(data_dir, sync="commit", index_interval=4096)
    relay_log.open()
    relay_log.apply([whole("mysql-bin.000001")])
    relay_log.apply([whole("mysql-bin.000002")])  # closes the first
    expected = sidecar_path(data_dir, "mysql-bin.000001").read_bytes()
    fs.cut()
    assert sidecar_path(data_dir, "mysql-bin.000001").read_bytes() == expected
    assert b'"complete"' in expected
