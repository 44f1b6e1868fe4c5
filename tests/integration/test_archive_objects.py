"""Archived objects against a real S3 API server (moto in server mode, tests/support/s3.py): an
upload is checked by the store's own checksum of the object, or read back; either way an object
that is not what was sent is refused.  A file is fetched back in runs of frames, several ranged
GETs streamed at once, whole and byte for byte; a stopped fetch ends at its next frame (one stopped
before its first sends no GET), and a damaged frame is told as damage, not as a stop.

moto keeps the checksum it is sent without checking it against the bytes (real S3 refuses such a
part with BadDigest), so what these tests show is the relay's side: the checksum it sends and
what it compares after the upload."""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from relay.archive.growing import FileChanged, GrowingFile, UploadStopped
from relay.archive.objectformat import ArchiveDamaged, ObjectMeta, ObjectWriter
from relay.archive.objects import (
    FETCH_CONCURRENCY,
    META_SUFFIX,
    ArchivedFileReader,
    FetchStopped,
    UploadMismatch,
    _runs,
    delete_archived,
    list_archive,
    meta_key,
    object_key,
    read_file_start_gtids,
    read_file_starts,
    upload,
    verify_upload,
)
from relay.archive.store import MIB, ObjectMissing, PutResult, S3Store, StoreConfig, StoreUnavailable
from relay.sandbox.polling import wait_for
from relay.storage.importer import BinlogImportError, check_file

if TYPE_CHECKING:
    from tests.support.s3 import S3Server

CHUNK = 1 * MIB


def binlog_like(size: int, seed: int) -> bytes:
    """Compressible bytes (upload() takes any file: the caller checked its events)."""
    rng = random.Random(seed)
    words = [rng.randbytes(rng.randrange(4, 40)) for _ in range(500)]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words)
    return bytes(out[:size])


def store_of(s3_server: S3Server, **overrides: object) -> S3Store:
    return S3Store(s3_server.store_config(multipart_threshold=5 * MIB, part_size=5 * MIB, **overrides))


class GetCountingStore(S3Store):
    """The real store, counting the streamed GETs that left (a generator's request leaves at its
    first piece)."""

    gets = 0

    def get_pieces(self, name: str, start: int, sizes: Sequence[int]) -> Generator[bytes, None, None]:
        self.gets += 1
        yield from super().get_pieces(name, start, sizes)


def put_object(store: S3Store, name: str, data: bytes) -> tuple[ObjectMeta, PutResult]:
    """What upload() does before its check: the object streamed up, frame by frame."""
    writer = ObjectWriter(name, chunk_size=CHUNK)

    def frames():
        for start in range(0, len(data), 300_000):
            yield from writer.write(data[start:start + 300_000])
        yield writer.finish()

    sent = store.put(object_key(name), frames())
    assert writer.meta is not None
    return writer.meta, sent


@pytest.mark.parametrize("size", [2 * MIB, 14 * MIB + 7], ids=["single PUT", "multipart"])
def test_an_upload_is_checked_by_the_stores_checksum_or_read_back(s3_server: S3Server, size: int) -> None:
    data = os.urandom(size)  # incompressible: the object is as large as the file
    store = store_of(s3_server)
    meta, sent = put_object(store, "mysql-bin.000001", data)
    assert verify_upload(store, meta, sent, []) == "store's checksum"
    assert verify_upload(store, meta, sent, [], read_back=True) == "read-back"
    # a store asked for no checksum keeps none: the object is read back
    plain = store_of(s3_server, request_checksums="when_required")
    plain_meta, plain_sent = put_object(plain, "mysql-bin.000002", data)
    assert plain_sent.checksums == frozenset()
    assert verify_upload(plain, plain_meta, plain_sent, []) == "read-back"
    # the object replaced by other bytes of the same size (as if the store had kept something else)
    # is refused both ways, and a missing one too
    other = bytearray(s3_server.client().get_object(Bucket=s3_server.bucket,
                                                    Key=f"archive/{object_key('mysql-bin.000001')}")["Body"].read())
    other[len(other) // 2] ^= 0x40
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=f"archive/{object_key('mysql-bin.000001')}",
                                  Body=bytes(other))
    with pytest.raises(UploadMismatch, match="checksum"):
        verify_upload(store, meta, sent, [])
    with pytest.raises(UploadMismatch, match="read back"):
        verify_upload(store, meta, sent, [], read_back=True)
    store.delete(object_key("mysql-bin.000001"))
    with pytest.raises(UploadMismatch, match="no object"):
        verify_upload(store, meta, sent, [])


def test_a_file_is_fetched_back_in_runs_streamed_at_once(s3_server: S3Server, tmp_path: Path) -> None:
    data = binlog_like(11 * MIB + 12_345, seed=5)
    source = tmp_path / "mysql-bin.000003"
    source.write_bytes(data)
    store = store_of(s3_server)
    archived = upload(store, source, source.name, chunk_size=CHUNK)
    assert archived.file_size == len(data) and archived.object_size < len(data)
    reader = ArchivedFileReader(store, source.name, [])
    frames = reader._reader.layout.frames
    runs = _runs(frames, FETCH_CONCURRENCY, 64 * MIB)
    assert len(runs) == FETCH_CONCURRENCY and tuple(frame for run in runs for frame in run) == frames
    assert all(later[0].object_start == earlier[-1].object_end for earlier, later in zip(runs, runs[1:]))
    reader.copy_to(tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == data
    # more runs than GETs at once when a run would be too long; never more runs than frames
    assert len(_runs(frames, FETCH_CONCURRENCY, archived.object_size // 7)) >= 7
    assert len(_runs(frames[:2], FETCH_CONCURRENCY, 64 * MIB)) == 2

    # stopped: at the next frame, whatever the run
    asked = 0

    def stop() -> bool:
        nonlocal asked
        asked += 1
        return asked > 2

    with pytest.raises(FetchStopped):
        reader.copy_to(tmp_path / "stopped", stop)
    assert asked < len(frames)
    # stopped before its first frame (its client left while the object was opened): no GET leaves
    counting = GetCountingStore(store.config)
    with pytest.raises(FetchStopped):
        ArchivedFileReader(counting, source.name, []).copy_to(tmp_path / "stopped early", lambda: True)
    assert counting.gets == 0
    ArchivedFileReader(counting, source.name, []).copy_to(tmp_path / "counted")
    assert counting.gets == len(runs)

    # a frame damaged in the store: the damage is what is told, not the stop it causes in the other runs
    key = f"archive/{object_key(source.name)}"
    body = bytearray(s3_server.client().get_object(Bucket=s3_server.bucket, Key=key)["Body"].read())
    middle = runs[1][len(runs[1]) // 2]
    body[middle.object_start + middle.compressed_size // 2] ^= 0x01
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=key, Body=bytes(body))
    with pytest.raises(ArchiveDamaged) as damaged:
        ArchivedFileReader(store, source.name, []).copy_to(tmp_path / "damaged")
    assert not isinstance(damaged.value, FetchStopped)
    assert damaged.value.frame == middle.index


def test_opening_an_archived_file_tells_what_is_missing(s3_server: S3Server, tmp_path: Path) -> None:
    """The meta document and the object's trailer are asked for at once (two requests in flight
    together at the store's door): whichever fails, the error says what is wrong with the file, the
    meta's first (no meta: the file is not archived)."""
    data = binlog_like(3 * MIB, seed=9)
    source = tmp_path / "mysql-bin.000004"
    source.write_bytes(data)
    store = store_of(s3_server)
    with pytest.raises(ObjectMissing, match="mysql-bin.000004 is not in the archive"):
        ArchivedFileReader(store, source.name, [])
    upload(store, source, source.name, chunk_size=CHUNK)
    key = f"archive/{object_key(source.name)}"
    body = s3_server.client().get_object(Bucket=s3_server.bucket, Key=key)["Body"].read()

    s3_server.client().put_object(Bucket=s3_server.bucket, Key=key, Body=body + b"\0")  # one byte grown
    with pytest.raises(ArchiveDamaged):
        ArchivedFileReader(store, source.name, [])
    s3_server.client().delete_object(Bucket=s3_server.bucket, Key=key)
    with pytest.raises(ArchiveDamaged, match="its meta document is there, the object is not"):
        ArchivedFileReader(store, source.name, [])
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=key, Body=body)
    s3_server.proxy.hold_requests(together=2, deadline=10.0)  # one after the other: never two held
    assert ArchivedFileReader(store, source.name, []).read(0, len(data)) == data
    assert s3_server.proxy.most_held == 2, "the meta and the object's end were not asked for at once"
    s3_server.client().delete_object(Bucket=s3_server.bucket, Key=f"archive/{meta_key(source.name)}")
    with pytest.raises(ObjectMissing, match="mysql-bin.000004 is not in the archive"):
        ArchivedFileReader(store, source.name, [])


def random_rows_binlog(mariadb_factory: Any, rows_mib: int) -> bytes:
    """A closed binlog file of a real primary holding ``rows_mib`` MiB of random bytes in row events
    (incompressible: the object is as large as the file)."""
    primary = mariadb_factory(server_id=1, extra_args=["--binlog-format=ROW"])
    primary.sql("CREATE DATABASE IF NOT EXISTS test")
    primary.sql("CREATE TABLE test.t (b BLOB) ENGINE=InnoDB")
    for _ in range(rows_mib):
        primary.sql("INSERT INTO test.t SELECT RANDOM_BYTES(1024) FROM test.seq_1_to_1024")
    name = primary.master_status()[0]
    primary.sql("FLUSH BINARY LOGS")
    return primary.binlog_path(name).read_bytes()


class Writer:
    """The file as ingest writes it: appended to, then told committed (and at last closed)."""

    def __init__(self, path: Path, data: bytes) -> None:
        self.path, self.data, self.written = path, data, 0
        self.growing = GrowingFile(path.name, path, check_file)
        path.write_bytes(b"")

    def write_to(self, end: int, close: bool = False) -> None:
        with open(self.path, "ab") as stream:
            stream.write(self.data[self.written:end])
        self.written = end
        self.growing.grew(end, close)


def uploading(store: S3Store, writer: Writer) -> tuple[threading.Thread, dict[str, Any]]:
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["archived"] = upload(store, writer.path, writer.path.name, chunk_size=CHUNK,
                                         chunks=writer.growing.chunks)
        except BaseException as exc:  # noqa: BLE001 - the test looks at what it was
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def test_a_file_still_written_goes_up_part_by_part_and_is_completed_once_closed(
        mariadb_factory: Any, s3_server: S3Server, tmp_path: Path) -> None:
    data = random_rows_binlog(mariadb_factory, 14)
    store = store_of(s3_server)
    key = f"archive/{object_key('mysql-bin.000001')}"

    def parts_sent() -> int:
        uploads = s3_server.incomplete_uploads("archive/")
        if not uploads:
            return 0
        return len(s3_server.client().list_parts(Bucket=s3_server.bucket, Key=key,
                                                 UploadId=uploads[0]["UploadId"]).get("Parts", []))

    writer = Writer(tmp_path / "mysql-bin.000001", data)
    thread, outcome = uploading(store, writer)
    writer.write_to(len(data) - 3 * MIB)
    # parts go up as the file grows, and nothing looks like an archived file before it closes
    wait_for(lambda: parts_sent() >= 1, 30, "no part sent while the file was written")
    assert store.head(object_key("mysql-bin.000001")) is None and store.head(meta_key("mysql-bin.000001")) is None
    sent_before_close = parts_sent()
    writer.write_to(len(data), close=True)
    thread.join(60)
    assert "error" not in outcome, outcome
    assert outcome["archived"].file_size == len(data)
    assert sent_before_close >= 1 and not s3_server.incomplete_uploads("archive/")
    ArchivedFileReader(store, "mysql-bin.000001", []).copy_to(tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == data

    # stopped before the file closed (the relay stopping): the upload is aborted, nothing left
    stopped = Writer(tmp_path / "mysql-bin.000002", data)
    thread, outcome = uploading(store, stopped)
    # 10 MiB: the frames of the last chunks written are held back (in_order), and a multipart upload
    # begins only past 5 MiB of object
    stopped.write_to(10 * MIB)
    wait_for(lambda: bool(s3_server.incomplete_uploads("archive/")), 30, "the upload never began")
    stopped.growing.stop()
    thread.join(60)
    assert isinstance(outcome.get("error"), UploadStopped), outcome
    assert not s3_server.incomplete_uploads("archive/")
    assert store.head(object_key("mysql-bin.000002")) is None

    # closed with an event that fails its checksum (past what was already sent): not completed
    damaged = bytearray(data)
    damaged[len(data) - 1000] ^= 0x01
    bad = Writer(tmp_path / "mysql-bin.000003", bytes(damaged))
    thread, outcome = uploading(store, bad)
    bad.write_to(len(data), close=True)
    thread.join(60)
    assert isinstance(outcome.get("error"), BinlogImportError), outcome
    assert not s3_server.incomplete_uploads("archive/")
    assert store.head(object_key("mysql-bin.000003")) is None and store.head(meta_key("mysql-bin.000003")) is None

    # cut below what was committed while it was read: refused, not uploaded as it stands
    cut = Writer(tmp_path / "mysql-bin.000004", data)
    thread, outcome = uploading(store, cut)
    cut.write_to(10 * MIB)
    wait_for(lambda: bool(s3_server.incomplete_uploads("archive/")), 30, "the upload never began")
    os.truncate(cut.path, 5 * MIB)
    cut.growing.grew(len(data), False)
    thread.join(60)
    assert isinstance(outcome.get("error"), FileChanged), outcome
    assert not s3_server.incomplete_uploads("archive/")


class RetentionRacingStore(S3Store):
    """The real store, where archive.retention deletes ``racing`` (meta first, as delete_archived
    does) just after a reader has read its meta: the moment a check of the archive may meet it."""

    def __init__(self, config: StoreConfig, racing: str) -> None:
        super().__init__(config)
        self.racing = racing

    def get_tail(self, name: str, length: int) -> tuple[bytes, int]:
        if name == object_key(self.racing):
            delete_archived(self, self.racing)
        return super().get_tail(name, length)


def test_a_file_deleted_while_the_archive_is_checked_is_not_damage(s3_server: S3Server) -> None:
    """archive.retention deletes a file while `archive --verify` reads it: the check says so and
    does not count it as damaged (a scheduled check would otherwise fail on a healthy archive);
    a file whose object is gone under a meta that stays is damage."""
    from relay.archive.verify import verify_archive

    store = store_of(s3_server)
    for name in ("mysql-bin.000001", "mysql-bin.000002"):
        meta, _ = put_object(store, name, binlog_like(100_000, seed=7))
        store.put(meta_key(name), [meta.to_json()])
    store.delete(object_key("mysql-bin.000002"))
    lines: list[str] = []
    result = verify_archive(store.config, [], lines.append,
                            open_store_for=lambda config: RetentionRacingStore(config, "mysql-bin.000001"))
    assert result.deleted == ("mysql-bin.000001",) and result.verified == ()
    assert [damage.name for damage in result.damaged] == ["mysql-bin.000002"]
    assert "the object is not" in result.damaged[0].reason
    assert lines[0].startswith("deleted 1/2: mysql-bin.000001") and lines[1].startswith("DAMAGED 2/2")


def test_a_listing_of_the_newer_files_only_keeps_the_known_ones_and_finds_the_new(s3_server: S3Server) -> None:
    """A reader lists the files after its newest at each look (one request): the known files are
    taken as they are, the new ones are found; only a whole listing sees a deletion."""
    store = store_of(s3_server)
    for name in ("mysql-bin.000001", "mysql-bin.000002"):
        meta, _ = put_object(store, name, binlog_like(50_000, seed=3))
        store.put(meta_key(name), [meta.to_json()])
    known = list_archive(store)
    assert sorted(known) == ["mysql-bin.000001", "mysql-bin.000002"]
    meta, _ = put_object(store, "mysql-bin.000003", binlog_like(50_000, seed=4))
    store.put(meta_key("mysql-bin.000003"), [meta.to_json()])
    store.delete(meta_key("mysql-bin.000001"))
    newer = list_archive(store, known, newer_than="mysql-bin.000002")
    assert sorted(newer) == ["mysql-bin.000001", "mysql-bin.000002", "mysql-bin.000003"]
    assert newer["mysql-bin.000002"] is known["mysql-bin.000002"] and newer["mysql-bin.000003"].file_size == 50_000
    assert sorted(list_archive(store, newer)) == ["mysql-bin.000002", "mysql-bin.000003"]


class DiesBeforeTheMeta(S3Store):
    """The store as a relay killed between the object's PUT and its meta's sees it: the object lands,
    the meta never leaves."""

    def put(self, name: str, chunks: Any) -> PutResult:
        if name.endswith(META_SUFFIX):
            raise StoreUnavailable(f"{name}: the relay was killed before this PUT")
        return super().put(name, chunks)


def test_an_upload_again_never_leaves_a_committed_meta_over_another_object(s3_server: S3Server,
                                                                          tmp_path: Path) -> None:
    """A meta PUT that landed but whose answer was lost makes the relay upload the file again.  The
    committed meta goes first: killed before the new meta, the file is not archived (uploaded once
    more at the next start), where a meta naming the old object over the new one would be damage
    for good (each object has its own id, which its meta names)."""
    source = tmp_path / "mysql-bin.000001"
    source.write_bytes(binlog_like(3 * MIB, seed=11))
    store = store_of(s3_server)
    upload(store, source, source.name, chunk_size=CHUNK)
    assert source.name in list_archive(store)
    with pytest.raises(StoreUnavailable):
        upload(DiesBeforeTheMeta(store.config), source, source.name, chunk_size=CHUNK)
    assert source.name not in list_archive(store)
    upload(store, source, source.name, chunk_size=CHUNK)
    reader = ArchivedFileReader(store, source.name, [])
    assert reader.read(0, reader.size) == source.read_bytes()


def test_an_archived_file_whose_start_cannot_be_read_does_not_hide_the_others(s3_server: S3Server,
                                                                              tmp_path: Path) -> None:
    """Listing the archive reads the first events of the files it does not know yet: one damaged
    object is told for itself, and the other files are listed with their starts."""
    store = store_of(s3_server)
    for number in (1, 2):
        source = tmp_path / f"mysql-bin.00000{number}"
        source.write_bytes(binlog_like(200_000, seed=number))
        upload(store, source, source.name, chunk_size=CHUNK)
    key = f"archive/{object_key('mysql-bin.000001')}"
    body = bytearray(s3_server.client().get_object(Bucket=s3_server.bucket, Key=key)["Body"].read())
    body[20] ^= 0x01  # in its first frame
    s3_server.client().put_object(Bucket=s3_server.bucket, Key=key, Body=bytes(body))
    starts = read_file_starts(store, ["mysql-bin.000001", "mysql-bin.000002"], [])
    assert isinstance(starts["mysql-bin.000001"], ArchiveDamaged)
    assert starts["mysql-bin.000002"] == read_file_start_gtids(store, "mysql-bin.000002", [])
