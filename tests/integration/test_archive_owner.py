"""One archive, one relay (relay/archive/owner.py), against a real S3 API server: the first relay
to write an archive is recorded as its owner, another relay is refused with a message naming the
owner, a relay stood up from the archive takes it over, and the relay it replaced is refused from
then on."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.archive.owner import OWNER_KEY, ArchiveInUse, claim, read_owner, relay_id
from relay.archive.store import open_store

URL = "s3://test/relay"
PRIMARY = ("db1.example:3306",)


def _data_dirs(parent: Path, *names: str) -> list[Path]:
    made = [parent / name for name in names]
    for path in made:
        path.mkdir()
    return made


def test_the_first_relay_owns_the_archive_and_another_is_refused(s3_server, tmp_path):
    store = open_store(s3_server.store_config(prefix="relay"))
    first, second = _data_dirs(tmp_path, "first", "second")
    claim(store, URL, first, PRIMARY)
    owner = read_owner(store)
    assert owner is not None and owner.relay_id == relay_id(first) and owner.data_dir == str(first.resolve())
    assert owner.upstream == PRIMARY
    claim(store, URL, first, PRIMARY)  # its own archive, again (a restart): nothing changes
    assert read_owner(store) == owner
    with pytest.raises(ArchiveInUse) as refused:
        claim(store, URL, second, PRIMARY)
    assert relay_id(first) in str(refused.value) and str(first.resolve()) in str(refused.value)
    assert read_owner(store) == owner


def test_a_relay_stood_up_from_the_archive_takes_it_over(s3_server, tmp_path):
    store = open_store(s3_server.store_config(prefix="relay"))
    old, new = _data_dirs(tmp_path, "old", "new")
    claim(store, URL, old, PRIMARY)
    claim(store, URL, new, PRIMARY, take_over=True)
    assert read_owner(store).relay_id == relay_id(new)
    with pytest.raises(ArchiveInUse):
        claim(store, URL, old, PRIMARY)  # the relay it replaced, at its next check


def test_a_relay_of_other_primaries_does_not_take_the_archive_over(s3_server, tmp_path):
    store = open_store(s3_server.store_config(prefix="relay"))
    writing, other = _data_dirs(tmp_path, "writing", "other")
    claim(store, URL, writing, PRIMARY)
    with pytest.raises(ArchiveInUse) as refused:
        claim(store, URL, other, ("db9.example:3306",), take_over=True)
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
