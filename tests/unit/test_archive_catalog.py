"""archive.json, the archiver's copy of what the archive holds: written off the event loop as it
changes, the last change written as the relay stops, and read back as it was written."""

import time

import trio

from relay.archive.archiver import CATALOG, Archiver, ArchiveSettings, load_catalog
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
