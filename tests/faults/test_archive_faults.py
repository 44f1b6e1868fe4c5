"""The archive under faults (RELIABILITY.md): kill -9 of the relay while it uploads, kill -9 of the
relay writing an archive another relay reads, and the object store unreachable for a while (minutes
in the long run) while ingest goes on.  A real primary under
write load, a real replica of the relay, and a real S3 API server (moto behind a proxy the test
takes down, tests/support/s3.py).

Expected: every object the archive lists (a meta document) decodes to the primary's file, byte for
byte; no upload left half-done (an object without its meta is redone, a multipart upload aborted);
no local file purged before it was archived; the backlog uploaded once the store answers; ingest
and the replica never wait for the archive; nothing lost."""

from __future__ import annotations

import os
import random
import statistics
import time
from typing import Any

from relay.archive.objects import META_SUFFIX, OBJECT_DIR, ArchivedFileReader, list_archive
from relay.archive.store import ObjectStore, open_store
from relay.sandbox.compare import copy_differences
from relay.sandbox.polling import wait_for
from relay.sandbox.replication import FIRST_FILE, attach_replica
from relay.storage.index import read_index
from tests.faults.conftest import ARCHIVE_KILLS, DISK_MIB, STORE_DOWN_SECONDS, WRITER_KILLS, fill_disk
from tests.integration.test_archive import _mariadb_binlog, archive_config, relay_holds_the_primarys_newest
from tests.support.faults import SequenceLoad, converged_after_purges, metric
from tests.support.s3 import S3Server

RETENTION = {"max_size": "2M", "min_files": 2, "replica_grace": 0}
FREE_FOR_THE_BACKLOG = 12 << 20  # of the small disk: filled by a dozen files the archive cannot take


def _direct_store(s3: S3Server) -> ObjectStore:
    """The test's own view of the bucket: straight to moto, not through the proxy it takes down."""
    return open_store(s3.store_config(prefix="relay", endpoint_url=s3.moto.endpoint))


def _archive_matches_the_primary(primary: Any, s3: S3Server) -> int:
    """Every archived file decodes to the primary's bytes; every object has its meta (an upload
    cut short was redone); no multipart upload is left.  Returns how many files were checked."""
    store = _direct_store(s3)
    archived = list_archive(store)
    primary_files = {name for name, _ in primary.binlog_files()}
    for name in archived:
        assert name in primary_files, f"{name} archived, but the primary never wrote it"
        original = primary.binlog_path(name).read_bytes()
        reader = ArchivedFileReader(store, name, ())
        assert reader.read(0, reader.size) == original, f"archived {name} differs from the primary's"
    objects = {obj.name for obj in store.list(OBJECT_DIR)}
    orphans = [key for key in objects if not key.endswith(META_SUFFIX)
               and key.removeprefix(OBJECT_DIR).removesuffix(".zst") not in archived]
    assert not orphans, f"objects without their meta document: {orphans}"
    assert not s3.incomplete_uploads(), s3.incomplete_uploads()
    return len(archived)


def _purged_only_once_archived(primary: Any, relay: Any, s3: S3Server) -> None:
    archived = set(list_archive(_direct_store(s3)))
    stored = read_index(relay.data_dir)
    purged = {name for name, _ in primary.binlog_files() if stored and name < stored[0]}
    assert purged <= archived, f"purged locally but not archived: {sorted(purged - archived)}"


def _recovered(primary: Any, relay: Any, replica: Any, commits: int, s3: S3Server) -> tuple[Any, int]:
    """After the faults: the relay and the replica caught up with nothing lost, the archive too, and
    every archived file the primary's; returns the recovery times and how many files were checked."""
    recovery = converged_after_purges(primary, relay, [replica], commits)
    backlog = metric(relay, "binlog_relay_archive_lag_files") or 0  # the long run's kills leave thousands
    wait_for(lambda: metric(relay, "binlog_relay_archive_lag_files") == 0, 120 + 0.1 * backlog,
             f"the archive did not catch up with a backlog of {backlog:.0f} files")
    checked = _archive_matches_the_primary(primary, s3)
    closed = len(primary.binlog_files()) - 1
    assert checked == closed, f"{checked} files archived of the {closed} the primary closed"
    _purged_only_once_archived(primary, relay, s3)
    assert "Traceback" not in relay.log_text()
    return recovery, checked


def test_kill9_while_uploading(mariadb_factory, fault_relay, fault_figures, s3_server):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=1048576"])
    relay = fault_relay("relay", primary.port, archive=archive_config(s3_server), storage={"retention": RETENTION})
    replica = mariadb_factory(server_id=11)
    attach_replica(replica, relay.port, log_file=FIRST_FILE, log_pos=4)
    rng = random.Random(20261126)
    restarts: list[float] = []
    uploading_kills = 0
    with SequenceLoad(primary) as load:
        load.wait_commits(50)
        for _cycle in range(ARCHIVE_KILLS):
            wait_for(lambda: (metric(relay, "binlog_relay_archive_lag_files") or 0) >= 1, 60,
                     "no closed file waiting for the archive")
            deadline = time.monotonic() + rng.uniform(0.0, 0.4)
            wait_for(lambda deadline=deadline: time.monotonic() >= deadline, 5)
            uploading_kills += (metric(relay, "binlog_relay_archive_lag_files") or 0) >= 1
            relay.kill9()
            killed = time.monotonic()
            relay.start()
            relay.wait_listening()
            restarts.append(time.monotonic() - killed)
        commits = load.stop()
    recovery, checked = _recovered(primary, relay, replica, commits, s3_server)
    fault_figures("archive_kill9",
                  fault="kill -9 of the relay while closed files wait for the archive or upload (0-0.4 s after one "
                        "is waiting), under write load, a replica attached, local retention purging",
                  injected=f"{ARCHIVE_KILLS} kills ({uploading_kills} with a file not yet archived; "
                           f"{commits:,} transactions)",
                  data_lost="0", diverged="0",
                  recovery=f"kill to listening: median {statistics.median(restarts):.2f} s; every one of the "
                           f"{checked} archived files decodes to the primary's bytes, no object without its meta, "
                           f"no multipart upload left, no local file purged before it was archived; {recovery}",
                  memory=f"peak RSS {relay.peak_rss_bytes() / 2**20:.1f} MiB")


def _the_writer(relays: list[Any]) -> Any:
    """The one relay that says it writes the archive (None while none does, or two think so)."""
    writers = [relay for relay in relays if metric(relay, "binlog_relay_archive_writer") == 1]
    return writers[0] if len(writers) == 1 else None


def test_kill9_of_the_writer_of_a_shared_archive(mariadb_factory, fault_relay, fault_figures, s3_server, tmp_path):
    """Two relays of one primary share an archive (archive.writer_lease 4 s): the one writing it is
    killed while files wait for the archive, the other takes it over, the killed one comes back as a
    reader.  Every closed file archived once and whole, nothing purged unarchived by either, each
    relay serving the whole history as the primary wrote it."""
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=1048576"])
    archive = {**archive_config(s3_server), "writer_lease": "4s"}
    relays = [fault_relay(name, primary.port, archive=archive, storage={"retention": RETENTION}, server_id=server_id)
              for name, server_id in (("a", 1001), ("b", 1002))]
    replica = mariadb_factory(server_id=11)
    attach_replica(replica, relays[0].port, log_file=FIRST_FILE, log_pos=4)
    rng = random.Random(20261129)
    takeovers: list[float] = []
    with SequenceLoad(primary) as load:
        load.wait_commits(50)
        for cycle in range(WRITER_KILLS):
            writer = wait_for(lambda: _the_writer(relays), 60, f"cycle {cycle}: no one relay writes the archive")
            other = next(relay for relay in relays if relay is not writer)
            wait_for(lambda writer=writer: (metric(writer, "binlog_relay_archive_lag_files") or 0) >= 1, 60,
                     "no closed file waiting for the archive")
            deadline = time.monotonic() + rng.uniform(0.0, 0.4)
            wait_for(lambda deadline=deadline: time.monotonic() >= deadline, 5)
            writer.kill9()
            killed = time.monotonic()
            wait_for(lambda other=other: metric(other, "binlog_relay_archive_writer") == 1, 60,
                     f"cycle {cycle}: the other relay did not take the archive over")
            takeovers.append(time.monotonic() - killed)
            writer.start()
            writer.wait_listening()
        commits = load.stop()
    recovery = converged_after_purges(primary, relays[0], [replica], commits)
    wait_for(lambda: relay_holds_the_primarys_newest(relays[1], primary), 120, "relay b did not catch up")
    wait_for(lambda: all(metric(relay, "binlog_relay_archive_lag_files") == 0 for relay in relays), 300,
             "the archive did not catch up")
    checked = _archive_matches_the_primary(primary, s3_server)
    closed = len(primary.binlog_files()) - 1
    assert checked == closed, f"{checked} files archived of the {closed} the primary closed"
    everything = [primary.binlog_path(name) for name, _ in primary.binlog_files()]
    for relay in relays:
        _purged_only_once_archived(primary, relay, s3_server)
        served = tmp_path / f"through-{relay.work_dir.name}"
        # each archived file fetched back for the dump: a long run's 4,800 took 110-130 s
        run = _mariadb_binlog(relay.port, FIRST_FILE, served, timeout=max(120.0, 0.1 * len(everything)))
        assert run.returncode == 0, run.stderr
        assert not copy_differences(everything, served), f"relay {relay.work_dir.name} serves another history"
        assert "Traceback" not in relay.log_text()
    fault_figures("archive_writer_kill9",
                  fault="kill -9 of the relay writing an archive another relay of the same primary reads "
                        "(archive.writer_lease 4 s), while files wait for the archive, under write load, a replica "
                        "attached, local retention purging on both",
                  injected=f"{WRITER_KILLS} kills ({commits:,} transactions)",
                  data_lost="0", diverged="0",
                  recovery=f"kill to the other relay writing: median {statistics.median(takeovers):.1f} s (max "
                           f"{max(takeovers):.1f}); every one of the {checked} archived files decodes to the "
                           "primary's bytes, no object without its meta, no multipart upload left, neither relay "
                           f"purged a file before it was archived, both serve the whole history; {recovery}",
                  memory=f"peak RSS {max(relay.peak_rss_bytes() for relay in relays) / 2**20:.1f} MiB")


def test_store_down_while_ingest_goes_on(mariadb_factory, fault_relay, fault_figures, s3_server):
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=1048576"])
    relay = fault_relay("relay", primary.port, archive=archive_config(s3_server), storage={"retention": RETENTION})
    replica = mariadb_factory(server_id=11)
    attach_replica(replica, relay.port, log_file=FIRST_FILE, log_pos=4)
    with SequenceLoad(primary, rate=500) as load:
        load.wait_commits(50)
        wait_for(lambda: (metric(relay, "binlog_relay_archive_files") or 0) >= 1, 60, "nothing archived")
        s3_server.proxy.refuse()
        down_at = time.monotonic()
        files_before = len(read_index(relay.data_dir))
        most_lag = 0.0
        while time.monotonic() - down_at < STORE_DOWN_SECONDS:
            most_lag = max(most_lag, metric(relay, "binlog_relay_archive_lag_files") or 0)
            _purged_only_once_archived(primary, relay, s3_server)
            deadline = time.monotonic() + 1.0
            wait_for(lambda deadline=deadline: time.monotonic() >= deadline, 5)
        assert metric(relay, "binlog_relay_archive_store_up") == 0
        assert metric(relay, "binlog_relay_upstream_connected") == 1, "ingest stopped while the store was down"
        assert most_lag >= 1 and len(read_index(relay.data_dir)) > files_before, "nothing closed meanwhile"
        backlog = {name for name, _ in primary.binlog_files()[:-1]} - set(list_archive(_direct_store(s3_server)))
        s3_server.proxy.accept()
        back_at = time.monotonic()
        wait_for(lambda: backlog <= set(list_archive(_direct_store(s3_server))), 180, "the backlog was not uploaded")
        caught_up = time.monotonic() - back_at
        commits = load.stop()
    recovery, checked = _recovered(primary, relay, replica, commits, s3_server)
    fault_figures("archive_store_down",
                  fault="the archive's object store unreachable (connections refused at a proxy) while the primary "
                        "writes about 500 transactions a second, a replica attached, local retention on",
                  injected=f"{STORE_DOWN_SECONDS} s down ({commits:,} transactions)", data_lost="0", diverged="0",
                  recovery=f"ingest and the replica went on; at most {most_lag:.0f} files waited, none purged "
                           f"before it was archived; the backlog ({len(backlog)} files) archived {caught_up:.1f} s "
                           f"after the store came back; all {checked} archived files decode to the primary's "
                           f"bytes; {recovery}",
                  memory=f"peak RSS {relay.peak_rss_bytes() / 2**20:.1f} MiB")


def test_full_disk_while_the_archive_is_behind(mariadb_factory, small_disk, fault_relay, fault_figures, s3_server):
    """The store is down, so nothing may be purged, and data_dir fills up: ingest pauses as it does
    on any full disk (nothing lost, nothing unarchived purged); once the store answers, the backlog
    is archived, retention frees the disk and ingest resumes by itself.  The bytes ingest left free
    are taken too (another process filling the disk): a purge must write binlog.index and the
    replica book first, and does so in the room of data_dir's space reserve."""
    primary = mariadb_factory(server_id=1, extra_args=["--max-binlog-size=1048576"])
    relay = fault_relay("relay", primary.port, archive=archive_config(s3_server), storage={"retention": RETENTION})
    assert os.stat(relay.data_dir).st_dev == os.stat(small_disk).st_dev, "data_dir is not on the small disk"
    replica = mariadb_factory(server_id=11)
    attach_replica(replica, relay.port, log_file=FIRST_FILE, log_pos=4)
    fill_disk(small_disk / "ballast", FREE_FOR_THE_BACKLOG)
    with SequenceLoad(primary, rate=500) as load:
        load.wait_commits(50)
        s3_server.proxy.refuse()
        wait_for(lambda: metric(relay, "binlog_relay_upstream_disk_full") == 1, 120, "data_dir never filled up")
        fill_disk(small_disk / "the-last-bytes", 0)
        waiting = metric(relay, "binlog_relay_archive_lag_files") or 0
        _purged_only_once_archived(primary, relay, s3_server)
        assert waiting >= 1 and relay.alive()
        s3_server.proxy.accept()
        back_at = time.monotonic()
        wait_for(lambda: metric(relay, "binlog_relay_upstream_disk_full") == 0, 120, "ingest did not resume")
        resumed = time.monotonic() - back_at
        assert "its space reserve" in relay.log_text()
        commits = load.stop()
    recovery, checked = _recovered(primary, relay, replica, commits, s3_server)
    fault_figures("archive_disk_full",
                  fault=f"the store down while data_dir ({DISK_MIB} MiB tmpfs, {FREE_FOR_THE_BACKLOG >> 20} MiB left "
                        "for binlogs) fills up with files that may not be purged before they are archived; then "
                        "the bytes ingest left free are taken too, so a purge's writes need the space reserve",
                  injected=f"1 full disk ({commits:,} transactions)", data_lost="0", diverged="0",
                  recovery=f"ingest paused with {waiting:.0f} files waiting for the archive, none purged before "
                           f"it was archived; ingest resumed {resumed:.1f} s after the store came back; all "
                           f"{checked} archived files decode to the primary's bytes; {recovery}",
                  memory=f"peak RSS {relay.peak_rss_bytes() / 2**20:.1f} MiB")
