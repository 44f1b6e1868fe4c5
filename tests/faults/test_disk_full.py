"""data_dir on a small file system that fills up (a 48 MiB tmpfs the test mounts, as root).

Expected of the relay: ingest pauses with a clear log line and metric (binlog_relay_upstream_disk_full),
it does not reconnect to the primary again and again while the disk stays full (the upstream connections
are counted at a proxy in front of the primary), serving goes on (a replica keeps its connection and
gets what is stored, a raw dump reads it), every stored byte is the primary's, and ingest resumes by
itself once space is freed: the relay becomes a mirror and the replica holds every transaction once.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest
import trio

from relay.archive.archiver import Archiver, ArchiveSettings, load_catalog
from relay.archive.objects import ArchivedFile
from relay.archive.store import StoreConfig
from relay.sandbox.polling import wait_for
from relay.sandbox.replication import FIRST_FILE, attach_replica
from relay.storage.files import SPACE_RESERVE, SPACE_RESERVE_BYTES, atomic_write, first_difference, keep_space_reserve
from relay.storage.index import read_index, write_index
from relay.storage.relaylog import RelayLog
from tests.faults.conftest import DISK_MIB, fill_disk
from tests.faults.proxy import FaultProxy
from tests.support.faults import SequenceLoad, converged, metric
from tests.support.replication import assert_healthy, dump_events

FREE_AT_START_MIB = 6
FULL_WINDOW = 8.0  # seconds the disk is kept full while the connections to the primary are counted
MOST_CONNECTIONS_WHILE_FULL = 1
LOAD_RATE = 2000  # transactions a second, about 1 MB/s of binlog


def _not_a_prefix(primary, data_dir: Path, stored: list[str]) -> list[str]:
    """Stored files that are not the primary's bytes (the last one may be a prefix of the primary's)."""
    problems = []
    for name in stored:
        copy, original = data_dir / name, primary.binlog_path(name)
        difference = first_difference(original, copy, active=True)
        if difference is not None and difference != copy.stat().st_size:
            problems.append(f"{name}: differs from the primary's at offset {difference}")
    return problems


@pytest.mark.parametrize("groups", [
    "small",  # the counted load's transactions: at most 48 KiB each
    "larger_than_free_space",  # one group that does not fit: cutting it back must not count as space freed
])
def test_disk_full_pauses_ingest_and_resumes(mariadb_factory, small_disk, fault_relay, fault_figures, groups):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=8388608"])
    counter = FaultProxy(primary.port)  # forwards unchanged; counts the relay's connections to the primary
    try:
        relay = fault_relay("relay", counter.port)
        assert os.stat(relay.data_dir).st_dev == os.stat(small_disk).st_dev, "data_dir is not on the small disk"
        replica = mariadb_factory(server_id=11)
        attach_replica(replica, relay.port, log_file=FIRST_FILE, log_pos=4)
        ballast = small_disk / "ballast"
        fill_disk(ballast, FREE_AT_START_MIB << 20)
        # Small transactions, paced: unpaced, a fast machine wrote more binlog before the end of the
        # full window than the whole disk holds, and the relay could never become a mirror.
        with SequenceLoad(primary, big_every=None, rate=LOAD_RATE) as load:
            primary.execute_many(["CREATE DATABASE bulk", "CREATE TABLE bulk.t (id INT AUTO_INCREMENT PRIMARY KEY,"
                                  " v VARBINARY(1024)) ENGINE=InnoDB"])
            if groups == "small":
                load.wait_commits(1)
            else:  # one transaction of about 8 MiB, more than the disk has left
                primary.sql("INSERT INTO bulk.t (v) SELECT RANDOM_BYTES(1000) FROM bulk.seq_1_to_8000")
            wait_for(lambda: "is full" in relay.log_text(), 60, "the relay never said data_dir is full")
            full_since = time.monotonic()
            connections_before = counter.connections
            # serving goes on while full: the replica stays connected and reaches what the relay stored
            committed = relay.stored_files()
            deadline = full_since + FULL_WINDOW
            wait_for(lambda: time.monotonic() >= deadline, FULL_WINDOW + 5)  # the observation window itself
            connections_while_full = counter.connections - connections_before
            assert connections_while_full <= MOST_CONNECTIONS_WHILE_FULL, (
                f"{connections_while_full} connections to the primary in {FULL_WINDOW:.0f}s while data_dir was full"
                f" (each downloads the same events again); relay log:\n{relay.log_text()[-2000:]}")
            assert metric(relay, "binlog_relay_upstream_disk_full") == 1
            assert_healthy(replica)
            events = dump_events(relay.port, FIRST_FILE, 4, server_id=950)
            assert events, "a dump of the stored files got nothing while data_dir was full"
            commits = load.stop()
        log = relay.log_text()
        assert "is full" in log and "ingest paused" in log, log[-3000:]
        problems = _not_a_prefix(primary, relay.data_dir, relay.stored_files())
        assert not problems, problems
        freed = time.monotonic()
        ballast.unlink()
        recovery = converged(primary, relay, [replica], commits, timeout=120)
        total = time.monotonic() - freed
        assert metric(relay, "binlog_relay_upstream_disk_full") == 0
        assert (metric(relay, "binlog_relay_upstream_disk_full_pauses_total") or 0) >= 1
        assert "has space again" in relay.log_text()
        assert "Traceback" not in relay.log_text()
        fault_figures(f"disk_full[{groups}]",
                      fault=f"data_dir full ({DISK_MIB} MiB tmpfs mounted by the test, {FREE_AT_START_MIB} MiB left), "
                            + ("small transactions" if groups == "small" else
                               "one transaction (about 8 MiB) larger than the free space"),
                      injected=f"1 full disk, held {FULL_WINDOW:.0f} s ({commits:,} transactions)", data_lost="0",
                      diverged="0",
                      recovery=f"{connections_while_full} connections to the primary while full (counted at a "
                               f"proxy; bound {MOST_CONNECTIONS_WHILE_FULL}); log line and "
                               "`binlog_relay_upstream_disk_full` = 1; a dump of the stored files served meanwhile; "
                               f"after space is freed: {recovery} (mirror and replica current in {total:.1f} s)",
                      memory=f"peak RSS {relay.peak_rss_bytes() / 2**20:.1f} MiB",
                      detail=f"paused with {len(committed)} files stored")
    finally:
        counter.close()


def test_a_state_file_write_that_finds_the_disk_full_leaves_no_temp_file(small_disk):
    """The part of a failed write would keep the last free blocks from the small writes that free
    space (the replica book is written before each purge): the temp file goes with the failure."""
    data_dir = small_disk / "data"
    fill_disk(small_disk / "ballast", 256 << 10)
    free_before = os.statvfs(data_dir).f_bavail
    with pytest.raises(OSError) as failed:
        atomic_write(data_dir / "archive.json", b"x" * (1 << 20))
    assert failed.value.errno == errno.ENOSPC
    assert not (data_dir / "archive.json.tmp").exists() and not (data_dir / "archive.json").exists()
    assert os.statvfs(data_dir).f_bavail == free_before
    atomic_write(data_dir / "replicas.json", b"{}")  # a small write still fits


async def test_archived_files_may_go_while_a_full_disk_refuses_archive_json(small_disk, caplog):
    """archive.json lists a file before its local copy may go, but on a disk too full to write it
    (it grows with the archive, about 300 bytes a file) the store's word is enough: only a purge
    can free the space the copy needs."""
    data_dir = small_disk.parent / "relay" / "data"
    relay_log = RelayLog(data_dir)
    relay_log.open()
    archiver = Archiver(ArchiveSettings(StoreConfig("s3://bucket/relay")), relay_log)
    archived = ArchivedFile("mysql-bin.000001", 1 << 20, 400_000, True, time.time(), ("0-1-7",), None, None)
    fill_disk(small_disk / "ballast", 0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(archiver._keep_catalog)
        archiver.files[archived.name] = archived
        archiver._catalog_changed.set()
        with trio.fail_after(10):
            while "No space left on device" not in caplog.text:
                await trio.sleep(0.01)
        assert archiver.archived_names() == {archived.name}
        (small_disk / "ballast").unlink()
        with trio.fail_after(10):
            while load_catalog(data_dir, "s3://bucket/relay") != {archived.name: archived}:
                await trio.sleep(0.01)
        assert archiver.archived_names() == {archived.name}
        nursery.cancel_scope.cancel()
    relay_log.close()


def test_a_purge_is_written_in_the_space_reserve_on_a_disk_without_a_free_byte(small_disk, caplog):
    """A purge writes binlog.index (and the replica book) before it frees anything: on a disk
    another process filled to the last byte, data_dir's space reserve makes room for them, once,
    and is made again when there is room; other state files never take it."""
    data_dir = small_disk.parent / "relay" / "data"
    assert keep_space_reserve(data_dir)
    names = [f"mysql-bin.{number:06d}" for number in range(1, 200)]
    fill_disk(small_disk / "ballast", 0)
    with pytest.raises(OSError) as full:
        atomic_write(data_dir / "relay-state.json", b"x" * 8192)  # not a purge's write: the reserve stays
    assert full.value.errno == errno.ENOSPC and (data_dir / SPACE_RESERVE).exists()
    write_index(data_dir, names, use_reserve=True)
    assert read_index(data_dir) == names and not (data_dir / SPACE_RESERVE).exists()
    assert "its space reserve" in caplog.text
    assert not keep_space_reserve(data_dir)  # no room yet, and no partial reserve left behind
    assert not [path.name for path in data_dir.iterdir() if path.name.startswith(SPACE_RESERVE)]
    (small_disk / "ballast").unlink()
    assert keep_space_reserve(data_dir) and (data_dir / SPACE_RESERVE).stat().st_size == SPACE_RESERVE_BYTES
