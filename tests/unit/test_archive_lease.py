"""The writer's lease as a reader sees it (relay/archive/owner.py's LeaseWatch): lapsed only once
the record has stayed the same for a whole lease of observations; each renewal, and each failed
read, counts it again from the next answer."""

import time

import pytest

from relay.archive.archiver import Archiver, ArchiveSettings
from relay.archive.growing import UploadStopped
from relay.archive.owner import LeaseWatch, Owner
from relay.archive.store import StoreConfig
from relay.storage.relaylog import RelayLog

WRITER = Owner("a" * 32, ("db1.example:3306",), "relay-0", "/var/lib/binlog-relay", 1_700_000_000.0, 1_700_000_000.0)


def renewed(owner: Owner, at: float) -> Owner:
    return Owner(owner.relay_id, owner.upstream, owner.host, owner.data_dir, owner.since, at)


def test_no_record_is_no_writer():
    assert LeaseWatch(60).observe(None, 0.0)


def test_a_record_unchanged_for_a_whole_lease_has_lapsed():
    watch = LeaseWatch(60)
    assert not watch.observe(WRITER, 100.0)
    assert not watch.observe(WRITER, 159.9)
    assert watch.observe(WRITER, 160.0)


def test_each_renewal_counts_the_lease_again():
    watch = LeaseWatch(60)
    assert not watch.observe(WRITER, 100.0)
    assert not watch.observe(renewed(WRITER, 1_700_000_050.0), 150.0)
    assert not watch.observe(renewed(WRITER, 1_700_000_050.0), 209.9)
    assert watch.observe(renewed(WRITER, 1_700_000_050.0), 210.0)


def test_a_failed_read_counts_the_lease_again_from_the_next_answer():
    """A store down for everyone stops the writer's renewals too: the time it was down is no sign
    that the writer is gone."""
    watch = LeaseWatch(60)
    assert not watch.observe(WRITER, 100.0)
    watch.forget()
    assert not watch.observe(WRITER, 400.0)
    assert watch.observe(WRITER, 460.0)


def test_a_record_of_before_the_renewals_reads_as_renewed_at_its_claim():
    legacy = (b'{"data_dir": "/d", "format": "binlog-relay archive owner", "host": "h", "relay_id": "r", '
              b'"since": 12.5, "upstream": ["db1.example:3306"]}')
    owner = Owner.from_json(legacy)
    assert owner is not None and owner.renewed == 12.5
    assert Owner.from_json(owner.to_json()) == owner


def test_a_writer_whose_last_renewal_is_half_a_lease_old_commits_nothing(tmp_path):
    """The writer's own side of the lease: a reader takes the archive over after a whole lease, so
    a writer that has not renewed its record for half of one (paused, cut off from the store) must
    not commit a meta, whatever its flag still says."""
    relay_log = RelayLog(tmp_path, sync="none")
    relay_log.open()
    try:
        archiver = Archiver(ArchiveSettings(StoreConfig("s3://bucket/relay"), writer_lease=8.0), relay_log)
        archiver.status.writing = True
        archiver._renewed_at = time.monotonic()  # noqa: SLF001 - the renewal a claim records
        archiver._may_commit()  # noqa: SLF001
        archiver._renewed_at -= 4.5  # noqa: SLF001 - over half a lease ago
        with pytest.raises(UploadStopped, match="has not renewed its claim"):
            archiver._may_commit()  # noqa: SLF001
    finally:
        relay_log.close()
