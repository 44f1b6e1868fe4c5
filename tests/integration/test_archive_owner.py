"""One archive, one writer (relay/archive/owner.py), against a real S3 API server: the first relay
to write an archive is recorded as its writer and renews the record at each check; another relay
of the same primary is told who writes it (it reads the archive), one of another primary is
refused; a relay that takes the archive over writes it, and the relay it replaced is told so from
then on."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.archive.owner import OWNER_KEY, ArchiveInUse, WrittenByPeer, claim, read_owner, relay_id
from relay.archive.store import open_store

URL = "s3://test/relay"
PRIMARY = ("db1.example:3306",)


def _data_dirs(parent: Path, *names: str) -> list[Path]:
    made = [parent / name for name in names]
    for path in made:
        path.mkdir()
    return made


def test_the_first_relay_writes_the_archive_renews_its_record_and_another_is_told_who_writes(s3_server, tmp_path):
    store = open_store(s3_server.store_config(prefix="relay"))
    first, second = _data_dirs(tmp_path, "first", "second")
    claim(store, URL, first, PRIMARY)
    owner = read_owner(store)
    assert owner is not None and owner.relay_id == relay_id(first) and owner.data_dir == str(first.resolve())
    assert owner.upstream == PRIMARY
    claim(store, URL, first, PRIMARY)  # its next check (or a restart): the same writer, renewed
    renewed = read_owner(store)
    assert (renewed.relay_id, renewed.since) == (owner.relay_id, owner.since) and renewed.renewed > owner.renewed
    with pytest.raises(WrittenByPeer) as told:
        claim(store, URL, second, PRIMARY)
    assert told.value.owner == renewed
    assert relay_id(first) in str(told.value) and str(first.resolve()) in str(told.value)
    assert read_owner(store) == renewed


def test_a_relay_whose_lease_lapsed_is_taken_over(s3_server, tmp_path):
    store = open_store(s3_server.store_config(prefix="relay"))
    old, new = _data_dirs(tmp_path, "old", "new")
    claim(store, URL, old, PRIMARY)
    claim(store, URL, new, PRIMARY, take_over=True)
    assert read_owner(store).relay_id == relay_id(new)
    with pytest.raises(WrittenByPeer):
        claim(store, URL, old, PRIMARY)  # the relay it replaced, at its next check: it reads from then on


def test_a_relay_of_other_primaries_does_not_take_the_archive_over(s3_server, tmp_path):
    store = open_store(s3_server.store_config(prefix="relay"))
    writing, other = _data_dirs(tmp_path, "writing", "other")
    claim(store, URL, writing, PRIMARY)
    with pytest.raises(ArchiveInUse) as refused:
        claim(store, URL, other, ("db9.example:3306",), take_over=True)
    assert not isinstance(refused.value, WrittenByPeer)  # neither read nor written
    assert "another primary's archive" in str(refused.value) and "db1.example:3306" in str(refused.value)
    assert read_owner(store).relay_id == relay_id(writing)
    claim(store, URL, other, ("db9.example:3306", "db1.example:3306"), take_over=True)  # one primary in common
    assert read_owner(store).relay_id == relay_id(other)


def test_the_record_follows_the_owners_primaries(s3_server, tmp_path):
    store = open_store(s3_server.store_config(prefix="relay"))
    claim(store, URL, tmp_path, PRIMARY)
    claim(store, URL, tmp_path, ("db2.example:3306",))  # its configuration changed: a rebuild takes over by it
    assert read_owner(store).upstream == ("db2.example:3306",)


def test_the_relay_id_is_kept_and_a_record_that_is_not_one_is_claimed_over(s3_server, tmp_path):
    store = open_store(s3_server.store_config(prefix="relay"))
    assert relay_id(tmp_path) == relay_id(tmp_path) and len(relay_id(tmp_path)) == 32
    store.put(OWNER_KEY, [b"not json"])
    claim(store, URL, tmp_path, PRIMARY)
    assert read_owner(store).relay_id == relay_id(tmp_path)
