"""Relays of one primary sharing one archive (relay/archive/owner.py), with a real primary and a real
S3 API server: one writes it, the others read it (serve what it archived, purge a local file only
once the archive's copy equals their own, upload nothing); once the writer has been silent for a
lease a reader takes the archive over, and the old writer, back, reads it; none of it depends on
the hosts' clocks agreeing.  A local file whose archived copy is other bytes stays on the disk and
is served from there."""

from __future__ import annotations

import time
from typing import Any

from relay.archive.objects import object_key, upload
from relay.archive.owner import read_owner, relay_id
from relay.archive.store import open_store
from relay.sandbox.compare import copy_differences
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import LOOPBACK, free_port
from relay.storage.index import read_index
from tests.integration.test_archive import (
    _mariadb_binlog,
    archive_config,
    archived_as_the_primary_wrote,
    closed_files,
    relay_holds_the_primarys_newest,
    write_files,
)
from tests.support.faults import metric
from tests.support.s3 import S3Server

LEASE = 4  # seconds (the least allowed): the writer renews every second
SKEW = 300  # seconds between a host's clock and the store's: within S3's 15 minutes for a request's date
PURGE_ALL_BUT_TWO = {"retention": {"max_size": "16K", "min_files": 2, "replica_grace": 0}}


def _shared_archive(s3: S3Server) -> dict[str, Any]:
    return {**archive_config(s3), "writer_lease": f"{LEASE}s"}


def _relay(relay_factory: Any, name: str, primary: Any, s3: S3Server, server_id: int, **overrides: Any) -> Any:
    return relay_factory(name, primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                         archive=_shared_archive(s3), server_id=server_id, **overrides)


def _reader_that_stored_the_files_first(relay_factory: Any, primary: Any, s3: S3Server) -> Any:
    """A relay that stored the primary's files before it was given the shared archive (it reads it,
    another relay writes it), its retention purging every archived file but two."""
    reader = relay_factory("reader", primary.port, metrics={"host": LOOPBACK, "port": free_port()}, server_id=1002,
                           storage=PURGE_ALL_BUT_TWO)
    wait_for(lambda: relay_holds_the_primarys_newest(reader, primary), 60, "the reader did not catch up")
    reader.stop()
    reader.config["archive"] = _shared_archive(s3)
    reader.start()
    reader.wait_listening()
    return reader


def test_relays_of_one_primary_share_an_archive_one_writes_the_others_read(
        mariadb_factory, relay_factory, s3_server, tmp_path):
    primary = mariadb_factory(server_id=1)
    writer = _relay(relay_factory, "writer", primary, s3_server, 1001, storage=PURGE_ALL_BUT_TWO)
    wait_for(lambda: metric(writer, "binlog_relay_archive_writer") == 1, 30, "the first relay does not write")
    reader = _relay(relay_factory, "reader", primary, s3_server, 1002, storage=PURGE_ALL_BUT_TWO)
    wait_for(lambda: "this relay reads it" in reader.log_text(), 30, "the second relay was not told who writes")
    write_files(primary, 4)
    closed = closed_files(primary)
    wait_for(lambda: metric(writer, "binlog_relay_archive_lag_files") == 0
             and metric(reader, "binlog_relay_archive_files") == len(closed), 60,
             "the reader did not list what the writer archived")
    # The reader's own copies go once the archive holds them and they compare equal.
    newest_two = [name for name, _ in primary.binlog_files()[-2:]]
    wait_for(lambda: read_index(reader.data_dir) == newest_two, 60, "the reader did not purge its archived copies")
    assert metric(reader, "binlog_relay_archive_writer") == 0
    assert metric(reader, "binlog_relay_archive_uploaded_files_total") == 0
    assert not metric(reader, "binlog_relay_archive_errors_total", operation="compare")
    # It serves the files only the archive holds, as the primary wrote them.
    everything = [primary.binlog_path(name) for name, _ in primary.binlog_files()]
    run = _mariadb_binlog(reader.port, closed[0], tmp_path / "through-the-reader")
    assert run.returncode == 0, run.stderr
    assert not copy_differences(everything, tmp_path / "through-the-reader")

    # The writer dies: once it has been silent for a lease the reader writes the archive.
    writer.kill9()
    wait_for(lambda: metric(reader, "binlog_relay_archive_writer") == 1, 30, "the reader did not take the archive over")
    assert "taken over from relay " + relay_id(writer.data_dir) in reader.log_text()
    write_files(primary, 2, table="after")
    wait_for(lambda: relay_holds_the_primarys_newest(reader, primary)
             and metric(reader, "binlog_relay_archive_lag_files") == 0, 60, "the new writer did not archive on")
    assert metric(reader, "binlog_relay_archive_uploaded_files_total") == 2
    store = open_store(s3_server.store_config(prefix="relay"))
    assert read_owner(store).relay_id == relay_id(reader.data_dir)

    # The old writer, back, reads the archive: it uploads nothing, not even what it missed.
    writer.start()
    writer.wait_listening()
    wait_for(lambda: "this relay reads it" in writer.log_text(), 30, "the old writer was not told who writes")
    write_files(primary, 1, table="later")
    closed = closed_files(primary)
    wait_for(lambda: metric(reader, "binlog_relay_archive_files") == len(closed)
             and metric(writer, "binlog_relay_archive_files") == len(closed), 60, "the last file was not archived")
    assert metric(writer, "binlog_relay_archive_writer") == 0
    assert metric(writer, "binlog_relay_archive_uploaded_files_total") == 0
    assert archived_as_the_primary_wrote(s3_server, primary) == closed
    assert "Traceback" not in writer.log_text() + reader.log_text()


def test_a_local_file_whose_archived_copy_is_other_bytes_stays_and_is_served(
        mariadb_factory, relay_factory, s3_server, tmp_path):
    """The same name with other bytes is another history (the primary's binlogs reset, say): a
    reader never purges its copy for the archive's, and says why."""
    primary = mariadb_factory(server_id=1)
    writer = _relay(relay_factory, "writer", primary, s3_server, 1001)
    write_files(primary, 3)
    closed = closed_files(primary)
    wait_for(lambda: metric(writer, "binlog_relay_archive_files") == len(closed), 60, "not archived")
    other = mariadb_factory(server_id=2)
    write_files(other, 3)
    replaced = closed[1]
    assert other.binlog_path(replaced).read_bytes() != primary.binlog_path(replaced).read_bytes()
    store = open_store(s3_server.store_config(prefix="relay"))
    upload(store, other.binlog_path(replaced), replaced)  # the archive's copy is now the other history's

    reader = _reader_that_stored_the_files_first(relay_factory, primary, s3_server)
    wait_for(lambda: metric(reader, "binlog_relay_archive_errors_total", operation="compare") == 1, 60,
             "the reader did not find the copy that differs")
    wait_for(lambda: closed[0] not in read_index(reader.data_dir), 60, "the reader purged nothing")
    assert replaced in read_index(reader.data_dir)
    assert f"the archived {replaced} is not this relay's copy" in reader.log_text()
    run = _mariadb_binlog(reader.port, replaced, tmp_path / "through-the-reader")
    assert run.returncode == 0, run.stderr
    served = [primary.binlog_path(name) for name, _ in primary.binlog_files()[1:]]
    assert not copy_differences(served, tmp_path / "through-the-reader")


def test_a_relay_stood_up_from_the_archive_reads_it_while_its_writer_lives(mariadb_factory, relay_factory, s3_server):
    """A relay started on an empty disk with the archive of a live writer (a pod whose volume was
    replaced) seeds itself from it and reads it: it takes nothing over while the writer renews."""
    primary = mariadb_factory(server_id=1)
    writer = _relay(relay_factory, "writer", primary, s3_server, 1001)
    write_files(primary, 2)
    wait_for(lambda: metric(writer, "binlog_relay_archive_files") == len(closed_files(primary)), 60, "not archived")
    newest_archived = closed_files(primary)[-1]
    started = time.time()
    seeded = _relay(relay_factory, "seeded", primary, s3_server, 1002)
    assert "seeded with " + newest_archived in seeded.log_text()
    write_files(primary, 2, table="after")
    closed = closed_files(primary)
    wait_for(lambda: metric(seeded, "binlog_relay_archive_files") == len(closed)
             and relay_holds_the_primarys_newest(seeded, primary), 60, "the seeded relay did not follow the writer")
    store = open_store(s3_server.store_config(prefix="relay"))
    wait_for(lambda: read_owner(store).renewed > started + 2 * LEASE, 30, "the writer did not renew its record")
    # two leases have gone by: the writer's renewals kept the archive its own
    assert metric(seeded, "binlog_relay_archive_writer") == 0
    assert metric(seeded, "binlog_relay_archive_uploaded_files_total") == 0
    assert metric(writer, "binlog_relay_archive_writer") == 1
    assert read_owner(store).relay_id == relay_id(writer.data_dir)
    assert archived_as_the_primary_wrote(s3_server, primary) == closed


def _unfinished_upload(s3: S3Server, name: str) -> str:
    """A multipart upload of ``name``'s object begun and never completed, as a relay killed while it
    uploads leaves one; its id."""
    started = s3.client().create_multipart_upload(Bucket=s3.bucket, Key=f"relay/{object_key(name)}")
    return str(started["UploadId"])


def _unfinished_upload_ids(s3: S3Server) -> list[str]:
    return [upload["UploadId"] for upload in s3.incomplete_uploads()]


def test_relays_whose_clocks_are_wrong_share_an_archive(mariadb_factory, relay_factory, s3_server, skewed_clock):
    """The writer's host clock five minutes ahead of the store's, the reader's five minutes behind:
    the lease is told from changes of the record, not from its times, and the uploads a dead relay
    left are told by the store's clock.  The reader takes nothing over while the writer renews,
    takes the archive over once it dies and aborts the upload it left, then aborts its own dead
    run's upload when it restarts."""
    primary = mariadb_factory(server_id=1)
    writer = _relay(relay_factory, "writer", primary, s3_server, 1001, env=skewed_clock(SKEW))
    wait_for(lambda: metric(writer, "binlog_relay_archive_writer") == 1, 30, "the first relay does not write")
    reader = _relay(relay_factory, "reader", primary, s3_server, 1002, env=skewed_clock(-SKEW))
    wait_for(lambda: "this relay reads it" in reader.log_text(), 30, "the second relay was not told who writes")
    store = open_store(s3_server.store_config(prefix="relay"))
    assert read_owner(store).renewed > time.time() + SKEW - 60, "the writer's clock is not ahead"
    write_files(primary, 2)
    wait_for(lambda: metric(reader, "binlog_relay_archive_files") == len(closed_files(primary)), 60,
             "the reader did not list what the writer archived")
    renewals_from = read_owner(store).renewed
    wait_for(lambda: read_owner(store).renewed > renewals_from + 2 * LEASE, 30, "the writer did not renew its record")
    assert metric(reader, "binlog_relay_archive_writer") == 0, "the reader took over from a writer that renews"
    assert read_owner(store).relay_id == relay_id(writer.data_dir)

    # The writer dies in the middle of an upload: the reader writes once the lease lapses, and the
    # upload, begun before it took over by the store's clock (after it, by the reader's), goes.
    left = _unfinished_upload(s3_server, primary.binlog_files()[-1][0])
    writer.kill9()
    wait_for(lambda: metric(reader, "binlog_relay_archive_writer") == 1, 30, "the reader did not take the archive over")
    assert read_owner(store).renewed < time.time() - SKEW + 60, "the reader's clock is not behind"
    wait_for(lambda: left not in _unfinished_upload_ids(s3_server), 30, "the dead writer's upload was left in place")

    # The new writer dies in the middle of an upload, and restarts: it aborts its dead run's upload.
    left = _unfinished_upload(s3_server, primary.binlog_files()[-1][0])
    reader.kill9()
    reader.start()
    reader.wait_listening()
    wait_for(lambda: metric(reader, "binlog_relay_archive_writer") == 1, 30, "the restarted relay does not write")
    wait_for(lambda: left not in _unfinished_upload_ids(s3_server), 30, "the relay left its dead run's upload")
    write_files(primary, 1, table="after")
    closed = closed_files(primary)
    wait_for(lambda: metric(reader, "binlog_relay_archive_files") == len(closed)
             and metric(reader, "binlog_relay_archive_lag_files") == 0, 60, "the restarted writer did not archive on")
    assert archived_as_the_primary_wrote(s3_server, primary) == closed
    assert not _unfinished_upload_ids(s3_server)


def test_a_reader_compares_again_an_archived_copy_it_could_not_read(mariadb_factory, relay_factory, s3_server):
    """An archived copy a reader cannot read back (damaged in the store, an upload the writer is
    redoing) is no verdict: the local copy stays and is served, and the reader compares again a
    lease later; once the copy reads back equal to its own, the local one may go (it used to stay
    until the reader's restart)."""
    primary = mariadb_factory(server_id=1)
    writer = _relay(relay_factory, "writer", primary, s3_server, 1001)
    write_files(primary, 3)
    closed = closed_files(primary)
    wait_for(lambda: metric(writer, "binlog_relay_archive_files") == len(closed), 60, "not archived")
    damaged = closed[1]
    client, key = s3_server.client(), f"relay/{object_key(damaged)}"
    sound = client.get_object(Bucket=s3_server.bucket, Key=key)["Body"].read()
    client.put_object(Bucket=s3_server.bucket, Key=key, Body=sound[:20] + bytes([sound[20] ^ 1]) + sound[21:])

    reader = _reader_that_stored_the_files_first(relay_factory, primary, s3_server)
    wait_for(lambda: f"the archived {damaged} cannot be read back" in reader.log_text(), 60,
             "the reader did not read the damaged copy")
    assert damaged in read_index(reader.data_dir)
    client.put_object(Bucket=s3_server.bucket, Key=key, Body=sound)
    wait_for(lambda: damaged not in read_index(reader.data_dir), 60, "the reader never compared the copy again")
    assert "Traceback" not in reader.log_text()


def test_a_writer_cut_off_from_the_store_for_half_a_lease_commits_nothing_until_it_claims_again(
        mariadb_factory, relay_factory, s3_server):
    """A writer that cannot renew its record for half a lease (the store unreachable from it, or the
    process paused) stops writing: the other relays take the archive over after a whole lease, and
    a meta it committed after that would be written over the new writer's (it used to go on
    writing).  Once the store answers it claims the archive again and archives on."""
    primary = mariadb_factory(server_id=1)
    writer = _relay(relay_factory, "writer", primary, s3_server, 1001)
    write_files(primary, 2)
    wait_for(lambda: metric(writer, "binlog_relay_archive_files") == len(closed_files(primary)), 60, "not archived")
    s3_server.proxy.refuse()
    try:
        wait_for(lambda: "the owner record not renewed for" in writer.log_text(), 30, "the writer did not step down")
        assert metric(writer, "binlog_relay_archive_writer") == 0
    finally:
        s3_server.proxy.accept()
    write_files(primary, 2)
    wait_for(lambda: metric(writer, "binlog_relay_archive_writer") == 1
             and metric(writer, "binlog_relay_archive_files") == len(closed_files(primary)), 60,
             "the writer did not claim the archive again and archive on")
    assert archived_as_the_primary_wrote(s3_server, primary) == closed_files(primary)
    assert "Traceback" not in writer.log_text()
