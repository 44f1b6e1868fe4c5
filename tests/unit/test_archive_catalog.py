"""archive.json, the archiver's copy of what the archive holds: written off the event loop as it
changes, written again after a failure without waiting for a change, the last change written as
the relay stops, and read back as it was written."""

import time
from dataclasses import replace

import trio

from relay.archive.archiver import CATALOG, Archiver, ArchiveSettings, load_catalog, save_catalog
from relay.archive.objects import ArchivedFile
from relay.archive.store import StoreConfig
from relay.storage.relaylog import RelayLog

URL = "s3://bucket/relay"


def _archived(name: str) -> ArchivedFile:
    return ArchivedFile(name, 1 << 20, 400_000, True, time.time(), ("0-1-7", "1-2-9"), 1_700_000_000,
                        1_700_000_060)


async def test_archive_json_follows_the_archived_files_and_keeps_the_last_change_at_stop(tmp_path):
    relay_log = RelayLog(tmp_path)
    relay_log.open()
    archiver = Archiver(ArchiveSettings(StoreConfig(URL)), relay_log)
    first, second = _archived("mysql-bin.000001"), _archived("mysql-bin.000002")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(archiver._keep_catalog)
        archiver.files[first.name] = first
        archiver._catalog_changed.set()
        with trio.fail_after(10):
            while load_catalog(tmp_path, URL) != {first.name: first}:
                await trio.sleep(0.01)
        archiver.files[second.name] = second
        archiver._catalog_changed.set()
        nursery.cancel_scope.cancel()  # the relay stops before the keeper's next write
    assert load_catalog(tmp_path, URL) == {first.name: first, second.name: second}
    assert load_catalog(tmp_path, "s3://another/archive") == {}  # another archive's copy is not ours
    relay_log.close()


def test_an_unreadable_archive_json_is_left_to_the_stores_listing(tmp_path):
    (tmp_path / CATALOG).write_text('{"url": "s3://bucket/relay", "files": [{"name": ')
    assert load_catalog(tmp_path, URL) == {}


async def test_a_failed_write_of_archive_json_is_tried_again_and_holds_the_files_purge(tmp_path, caplog):
    """A relay restarted while its store is down knows only what archive.json lists, and serves
    the archived files it lists: a copy that could not be written (here a directory in its place;
    a full disk is tests/faults/test_disk_full.py's) is written once it can be, not only at the
    next upload, which may be long in coming, and until then the file may not leave the local
    disk (purged, it would be missing from the history that relay serves)."""
    relay_log = RelayLog(tmp_path)
    relay_log.open()
    archiver = Archiver(ArchiveSettings(StoreConfig(URL)), relay_log)
    (tmp_path / CATALOG).mkdir()
    archived = _archived("mysql-bin.000001")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(archiver._keep_catalog)
        archiver.files[archived.name] = archived
        archiver._catalog_changed.set()
        with trio.fail_after(10):
            while "could not be written" not in caplog.text:
                await trio.sleep(0.01)
        assert archiver.archived_names() == set()
        (tmp_path / CATALOG).rmdir()
        with trio.fail_after(10):
            while archiver.archived_names() != {archived.name}:  # the copy is on disk before it counts
                await trio.sleep(0.01)
        assert load_catalog(tmp_path, URL) == {archived.name: archived}
        del archiver.files[archived.name]  # the store's listing lacks it: no longer archived, whatever the copy says
        assert archiver.archived_names() == set()
        nursery.cancel_scope.cancel()
    relay_log.close()


def test_each_files_line_is_kept_between_writes_and_dropped_with_the_file(tmp_path):
    first, second = _archived("mysql-bin.000001"), _archived("mysql-bin.000002")
    lines: dict = {}
    save_catalog(tmp_path, URL, {first.name: first, second.name: second}, lines)
    assert set(lines) == {first.name, second.name}
    changed = replace(second, commit_hi=second.commit_hi + 1)
    save_catalog(tmp_path, URL, {second.name: changed}, lines)  # first deleted, second changed
    assert load_catalog(tmp_path, URL) == {second.name: changed}
    assert set(lines) == {second.name}
