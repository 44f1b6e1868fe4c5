"""The archive and the relay host's clock (relay/archive/storeclock.py), with a real primary, a real
relay whose wall clock the test moves while it runs (tests/support/skewclock.c), and the tests' S3
server, which refuses a request dated more than 15 minutes off its clock as S3 does
(relay/sandbox/motoserver.py):
- past S3's limit the relay archives nothing, says that its clock is the cause (how far, which
  way), keeps ingesting and serving, purges nothing unarchived, and catches up by itself once its
  clock is set right; on an empty data_dir it refuses to start with the same words;
- /metrics gives the store's clock against the host's;
- archive.retention keeps the newest ``max_files``, and ages files by the store's clock: a host
  clock stepped ahead deletes nothing early, one stepped behind keeps nothing late."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from relay.archive.objects import META_SUFFIX, OBJECT_DIR, list_archive
from relay.archive.store import open_store
from relay.sandbox.polling import wait_for
from relay.sandbox.ports import LOOPBACK, free_port
from relay.sandbox.relayprocess import RelayProcessError, http_get
from relay.storage.index import read_index
from tests.integration.test_archive import (
    archive_config,
    archived_as_the_primary_wrote,
    closed_files,
    relay_holds_the_primarys_newest,
    write_files,
)
from tests.support.clock import set_skew
from tests.support.faults import metric
from tests.support.s3 import S3Server

PAST_S3S_LIMIT = 1200  # seconds ahead: S3 refuses requests dated more than 900 s off
STEP = 600  # seconds a clock is stepped by in the retention test: within S3's limit
MAX_AGE = 30  # seconds: archive.retention's max_age in that test
ONLY_THE_ACTIVE_FILE = {"retention": {"max_size": "16K", "min_files": 1, "replica_grace": 0}}
OFFSET = "binlog_relay_archive_store_clock_offset_seconds"


def _relay(relay_factory: Any, primary: Any, s3: S3Server, env: dict[str, str], **archive: Any) -> Any:
    return relay_factory("relay", primary.port, metrics={"host": LOOPBACK, "port": free_port()},
                         archive={**archive_config(s3), **archive}, storage=ONLY_THE_ACTIVE_FILE, env=env)


def _told_ahead(text: str) -> int | None:
    """The seconds a message says this host's clock is ahead of the store's."""
    found = re.findall(r"this host's clock is (\d+) s ahead of the store's", text)
    return int(found[-1]) if found else None


def test_a_clock_past_s3s_limit_stops_only_the_archive_until_it_is_set_right(
        mariadb_factory, relay_factory, s3_server, skewed_clock, tmp_path):
    primary = mariadb_factory(server_id=1)
    control = tmp_path / "clock"
    relay = _relay(relay_factory, primary, s3_server, skewed_clock(0, control))
    write_files(primary, 1)
    wait_for(lambda: metric(relay, "binlog_relay_archive_files") == len(closed_files(primary)), 60,
             "the relay did not archive with its clock right")
    assert abs(metric(relay, OFFSET)) <= 2

    set_skew(control, PAST_S3S_LIMIT)  # the host's clock stepped 20 minutes ahead
    write_files(primary, 3)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary), 60, "ingest stopped with the archive")
    wait_for(lambda: _told_ahead(relay.log_text()) is not None, 30, "the refusal was not told as the clock's")
    assert abs(_told_ahead(relay.log_text()) - PAST_S3S_LIMIT) <= 3
    log_text = relay.log_text()
    assert "set this host's clock right (NTP)" in log_text
    assert "check the credentials" not in log_text
    wait_for(lambda: metric(relay, "binlog_relay_archive_store_up") == 0, 30, "the store was not seen refusing")
    assert abs(metric(relay, OFFSET) + PAST_S3S_LIMIT) <= 3
    closed = closed_files(primary)
    archived_before = sorted(list_archive(open_store(s3_server.store_config(prefix="relay"))))
    assert len(archived_before) < len(closed)
    unarchived = [name for name in closed if name not in archived_before]
    assert set(unarchived) <= set(read_index(relay.data_dir)), "a file left the disk unarchived"
    assert metric(relay, "binlog_relay_archive_lag_files") == len(unarchived)
    assert http_get(relay.metrics_port, "/readyz")[0] == 200

    # Restarted so, its first request is a HEAD of the bucket, refused with no body to say why: the
    # answer's Date tells.
    relay.stop()
    relay.start()
    relay.wait_listening()
    wait_for(lambda: "checking the bucket: refused, this host's clock is" in relay.log_text(), 30,
             "the bucket's check was not told as refused for the clock")

    set_skew(control, 0)  # NTP sets it right: nothing to do but wait for the next try
    wait_for(lambda: metric(relay, "binlog_relay_archive_files") == len(closed)
             and metric(relay, "binlog_relay_archive_lag_files") == 0, 120, "the archive did not catch up")
    assert abs(metric(relay, OFFSET)) <= 2
    assert archived_as_the_primary_wrote(s3_server, primary) == closed
    wait_for(lambda: len(read_index(relay.data_dir)) == 1, 30, "retention did not purge the files once archived")
    assert relay.alive() and "Traceback" not in relay.log_text()


def test_a_relay_whose_clock_is_past_s3s_limit_cannot_stand_up_from_the_archive_and_says_why(
        mariadb_factory, relay_factory, s3_server, skewed_clock):
    """An empty data_dir is seeded from the archive, or the relay does not start (it would ask the
    primary for files it may have purged): the refusal names the clock, not the credentials."""
    primary = mariadb_factory(server_id=1)
    first = _relay(relay_factory, primary, s3_server, {})
    write_files(primary, 2)
    wait_for(lambda: metric(first, "binlog_relay_archive_files") == len(closed_files(primary)), 60, "nothing archived")
    first.stop()
    with pytest.raises(RelayProcessError) as refused:
        relay_factory("empty", primary.port, archive=archive_config(s3_server), env=skewed_clock(PAST_S3S_LIMIT))
    told = _told_ahead(str(refused.value))
    assert told is not None and abs(told - PAST_S3S_LIMIT) <= 3, str(refused.value)[-2000:]
    assert "holds no binlog and the archive could not seed it" in str(refused.value)


def test_archive_retention_keeps_the_newest_files(mariadb_factory, relay_factory, s3_server):
    primary = mariadb_factory(server_id=1)
    relay = _relay(relay_factory, primary, s3_server, {}, retention={"max_files": 2})
    write_files(primary, 5)
    closed = closed_files(primary)
    wait_for(lambda: relay_holds_the_primarys_newest(relay, primary)
             and metric(relay, "binlog_relay_archive_lag_files") == 0
             and sorted(list_archive(open_store(s3_server.store_config(prefix="relay")))) == closed[-2:],
             60, "the archive did not keep only the two newest files")
    assert metric(relay, "binlog_relay_archive_deleted_files_total") == len(closed) - 2
    assert metric(relay, "binlog_relay_archive_files") == 2
    assert archived_as_the_primary_wrote(s3_server, primary) == closed[-2:]


def _archived_times(s3: S3Server) -> dict[str, float]:
    """Each archived file's meta document's Last-Modified: when the store committed it, by its clock."""
    store = open_store(s3.store_config(prefix="relay"))
    return {listed.name[len(OBJECT_DIR):-len(META_SUFFIX)]: listed.last_modified.timestamp()
            for listed in store.list(OBJECT_DIR) if listed.name.endswith(META_SUFFIX)}


def _deletion_times(s3: S3Server, names: list[str], timeout: float, step: int) -> dict[str, float]:
    """When each of ``names`` left the archive (this host's clock, the store's here)."""
    gone: dict[str, float] = {}

    def all_gone() -> bool:
        present = _archived_times(s3)
        now = time.time()
        gone.update({name: now for name in names if name not in present and name not in gone})
        return len(gone) == len(names)

    wait_for(all_gone, timeout, f"not deleted within {timeout:.0f} s with the clock stepped by {step} s")
    return gone


def _stepped_and_aged(s3: S3Server, control: Path, names: list[str], step: int) -> None:
    """``names`` archived; the host's clock stepped by ``step`` s: each is deleted MAX_AGE s after
    the store committed it, by the store's clock, whatever the host's says."""
    committed = _archived_times(s3)
    set_skew(control, step)
    gone = _deletion_times(s3, names, MAX_AGE + 60, step)
    for name in names:
        age = gone[name] - committed[name]
        # Last-Modified has whole seconds, and the relay knows the store's clock to about one
        assert age >= MAX_AGE - 2, f"{name} deleted {age:.1f} s after it was archived (max_age {MAX_AGE} s)"


def test_archive_retention_ages_files_by_the_stores_clock_whatever_the_hosts_says(
        mariadb_factory, relay_factory, s3_server, skewed_clock, tmp_path):
    """A host clock stepped behind after files were archived would keep them 10 minutes too long by
    its own reckoning, one stepped ahead would delete at once what was archived a moment before."""
    primary = mariadb_factory(server_id=1)
    control = tmp_path / "clock"
    relay = _relay(relay_factory, primary, s3_server, skewed_clock(0, control), retention={"max_age": f"{MAX_AGE}s"})
    write_files(primary, 2)
    first = closed_files(primary)
    wait_for(lambda: set(first) <= set(_archived_times(s3_server)) and not set(first) & set(read_index(relay.data_dir)),
             60, "the first files were not archived and purged locally")
    _stepped_and_aged(s3_server, control, first, -STEP)

    write_files(primary, 2, table="after")  # archived with the host's clock 10 minutes behind
    second = [name for name in closed_files(primary) if name not in first]
    wait_for(lambda: set(second) <= set(_archived_times(s3_server))
             and not set(second) & set(read_index(relay.data_dir)), 60, "the next files were not archived")
    _stepped_and_aged(s3_server, control, second, STEP)
    assert metric(relay, "binlog_relay_archive_deleted_files_total") == len(first) + len(second)
    assert relay.alive() and "Traceback" not in relay.log_text()
