"""The archive's object store client (relay/archive/store.py) against a real S3 API server (moto in
server mode, tests/support/s3.py): put, ranged get, head, list, delete; a multipart upload killed
halfway leaves no object at its key and the next start's clean-up aborts it; wrong credentials and
a missing bucket give clear errors without any secret; a store that is down or hangs gives a
retryable error within seconds."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import uuid
import zlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from relay.archive.objectformat import TRAILER_PROBE, ObjectLayout, ObjectMeta, ObjectReader, ObjectWriter, load_kek
from relay.archive.store import (
    MIB,
    ObjectMissing,
    S3Store,
    StoreAccessError,
    StoreConfig,
    StoreUnavailable,
    StoreURL,
    open_store,
)
from relay.errors import FatalError, InputError, Refusal, RetryableError
from relay.sandbox.polling import wait_for
from relay.sandbox.s3 import REGION
from tests.support.certs import make_certs

if TYPE_CHECKING:
    from tests.support.s3 import S3Server

# the s3_moto and s3_server fixtures (the suite's conftest may register them as well)

REPO_ROOT = Path(__file__).resolve().parents[2]


def payload(size: int, seed: int = 0) -> bytes:
    return (seed.to_bytes(4, "big") + os.urandom(60)) * (size // 64) + b"z" * (size % 64)


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[start:start + size] for start in range(0, len(data), size)]


# ----------------------------------------------------------------------------- the interface


def test_url() -> None:
    assert StoreURL.parse("s3://bucket") == StoreURL("bucket", "")
    assert StoreURL.parse("s3://bucket/a/b/") == StoreURL("bucket", "a/b/")
    assert StoreURL.parse("s3://bucket/a").key("mysql-bin.000001") == "a/mysql-bin.000001"
    for bad in ("bucket/a", "https://bucket/a", "s3://", "s3:///a"):
        with pytest.raises(InputError, match="object store URL"):
            StoreURL.parse(bad)
    with pytest.raises(InputError, match="part size"):
        StoreConfig("s3://bucket", part_size=MIB)


def test_put_get_head_list_delete(s3_server: S3Server) -> None:
    store = open_store(s3_server.store_config())
    store.check()
    small = payload(100_000)
    result = store.put("mysql-bin.000001.zst", pieces(small, 7000))
    assert (result.size, result.parts) == (len(small), 0)
    head = store.head("mysql-bin.000001.zst")
    assert head is not None and head.size == len(small) and head.etag == result.etag
    assert head.checksum is None or head.checksum.startswith(("CRC32", "CRC64NVME", "SHA"))
    assert store.get_range("mysql-bin.000001.zst", 0, 10) == small[:10]
    assert store.get_range("mysql-bin.000001.zst", 99_990, 100_000) == small[-10:]
    assert store.get_range("mysql-bin.000001.zst", 99_990, 200_000) == small[-10:]  # what there is
    assert store.get("mysql-bin.000001.zst") == small
    # the end of an object and its size in one GET; all of it when it is shorter than asked
    assert store.get_tail("mysql-bin.000001.zst", 10) == (small[-10:], len(small))
    assert store.get_tail("mysql-bin.000001.zst", 300_000) == (small, len(small))
    store.put("mysql-bin.000001.zst.meta", [b"{}\n"])
    store.put("mysql-bin.000002.zst", [b""])
    assert store.head("mysql-bin.000002.zst") is not None
    assert [item.name for item in store.list()] == ["mysql-bin.000001.zst", "mysql-bin.000001.zst.meta",
                                                    "mysql-bin.000002.zst"]
    assert [item.name for item in store.list("mysql-bin.000002")] == ["mysql-bin.000002.zst"]
    assert [item.name for item in store.list("mysql-bin.", start_after="mysql-bin.000001.zst")] == [
        "mysql-bin.000001.zst.meta", "mysql-bin.000002.zst"]
    assert list(store.list(start_after="mysql-bin.000002.zst")) == []
    # names are relative to the URL's prefix: the bucket's keys carry it
    keys = [item["Key"] for item in s3_server.client().list_objects_v2(Bucket=s3_server.bucket)["Contents"]]
    assert keys == ["archive/mysql-bin.000001.zst", "archive/mysql-bin.000001.zst.meta", "archive/mysql-bin.000002.zst"]
    store.delete("mysql-bin.000001.zst")
    assert store.head("mysql-bin.000001.zst") is None
    store.delete("mysql-bin.000001.zst")  # again: no error, as S3 answers
    for read in (lambda: store.get_range("mysql-bin.000001.zst", 0, 10), lambda: store.get("mysql-bin.000001.zst"),
                 lambda: store.get_tail("mysql-bin.000001.zst", 10)):
        with pytest.raises(ObjectMissing, match="mysql-bin.000001.zst: no such object") as missing:
            read()
        assert isinstance(missing.value, Refusal)


def test_multipart_put(s3_server: S3Server) -> None:
    store = S3Store(s3_server.store_config(multipart_threshold=5 * MIB, part_size=5 * MIB))
    data = payload(12 * MIB + 12_345, seed=1)
    result = store.put("big", pieces(data, 777_777))  # pieces that do not fall on part boundaries
    assert (result.size, result.parts) == (len(data), 3)
    assert store.get_range("big", 0, len(data)) == data
    assert store.get_range("big", 5 * MIB - 3, 5 * MIB + 3) == data[5 * MIB - 3:5 * MIB + 3]
    head = store.head("big")
    assert head is not None and head.size == len(data)
    assert s3_server.incomplete_uploads() == []


def test_a_failing_source_aborts_the_upload_and_keeps_its_error(s3_server: S3Server) -> None:
    store = S3Store(s3_server.store_config(multipart_threshold=5 * MIB, part_size=5 * MIB))

    def source():
        yield payload(11 * MIB)
        raise OSError("disk read error")

    with pytest.raises(OSError, match="disk read error"):
        store.put("failed", source())
    assert store.head("failed") is None
    assert s3_server.incomplete_uploads() == []


def test_an_upload_cut_by_an_outage_is_aborted_before_the_next_upload(s3_server: S3Server) -> None:
    """The store goes away in the middle of a multipart upload: the abort fails too, so the upload
    stays, invisible and billed.  The store aborts it before its next upload, not at a restart."""
    store = S3Store(s3_server.store_config(multipart_threshold=5 * MIB, part_size=5 * MIB, max_attempts=1))

    def source():
        yield payload(6 * MIB)  # one part is sent once the next chunk comes
        yield payload(6 * MIB, seed=2)
        s3_server.proxy.refuse()
        yield payload(6 * MIB, seed=3)

    with pytest.raises(StoreUnavailable):
        store.put("cut.zst", source())
    (left,) = s3_server.incomplete_uploads()
    assert left["Key"].endswith("cut.zst")
    s3_server.proxy.accept()
    store.put("next.zst", [b"the next upload"])
    assert s3_server.incomplete_uploads() == []
    assert store.head("cut.zst") is None and store.get("next.zst") == b"the next upload"


def test_an_archived_object_through_the_store(s3_server: S3Server) -> None:
    """The two foundations together: an encrypted object streamed up as the writer makes it, its
    meta beside it, and ranges read back with ranged GETs of the trailer and of the frames only."""
    store = S3Store(s3_server.store_config(multipart_threshold=5 * MIB, part_size=5 * MIB))
    kek = load_kek(os.urandom(32), "test")
    data = os.urandom(9 * MIB + 1234)  # incompressible: the object needs a multipart upload
    writer = ObjectWriter("mysql-bin.000007", chunk_size=1 * MIB, kek=kek)

    def frames():
        for piece in pieces(data, 300_000):
            yield from writer.write(piece)
        yield writer.finish()

    result = store.put("mysql-bin.000007.zst", frames())
    assert writer.meta is not None and result.size == writer.meta.object_size and result.parts >= 1
    store.put("mysql-bin.000007.zst.meta", [writer.meta.to_json()])

    head = store.head("mysql-bin.000007.zst")
    assert head is not None
    meta_bytes = store.get_range("mysql-bin.000007.zst.meta", 0, 1 << 20)
    tail = store.get_range("mysql-bin.000007.zst", max(0, head.size - TRAILER_PROBE), head.size)
    layout = ObjectLayout.parse(tail, head.size, "mysql-bin.000007.zst")
    reader = ObjectReader(layout, ObjectMeta.from_json(meta_bytes, "mysql-bin.000007.zst.meta"), [kek])
    offset, length = 3 * MIB - 17, MIB + 40
    frames_needed = layout.frames_for(offset, length)
    assert len(frames_needed) == 3
    got = b"".join(frame.piece(reader.decode_frame(frame.index, store.get_range("mysql-bin.000007.zst",
                                                                                 frame.object_start,
                                                                                 frame.object_end)),
                               offset, length)
                   for frame in frames_needed)
    assert got == data[offset:offset + length]


@pytest.mark.parametrize("size", [100_000, 12 * MIB + 12_345], ids=["single PUT", "multipart"])
def test_the_store_keeps_the_checksum_of_what_was_sent(s3_server: S3Server, size: int) -> None:
    """Each part goes up with its CRC32 (the store refuses a part whose bytes differ from it) and the
    object keeps the store's own checksum, which an upload is checked against instead of a read-back."""
    store = S3Store(s3_server.store_config(multipart_threshold=5 * MIB, part_size=5 * MIB))
    data = payload(size, seed=2)
    result = store.put("sent", pieces(data, 777_777))
    assert (result.size, result.crc32) == (len(data), zlib.crc32(data))
    head = store.head("sent")
    # what the store says is the bytes' own checksum, worked out here: moto keeps the checksums it is
    # sent, so this is what shows that the relay sent the right ones
    if result.parts:
        # the parts as put() cuts them: the pieces given, joined until a part holds at least part_size bytes
        parts, part = [], b""
        for piece in pieces(data, 777_777):
            part += piece
            if len(part) >= 5 * MIB:
                parts, part = [*parts, part], b""
        parts += [part] if part else []
        assert len(parts) == result.parts == 3
        composite = zlib.crc32(b"".join(zlib.crc32(part).to_bytes(4, "big") for part in parts))
        assert head is not None and head.checksum in (f"CRC32:{b64crc(composite)}", f"CRC32:{b64crc(composite)}-3")
    else:
        assert head is not None and head.checksum == f"CRC32:{b64crc(zlib.crc32(data))}"
    assert head.checksum in result.checksums
    # what the store says is its own: other bytes of the same size give another checksum
    s3_server.client().put_object(Bucket=s3_server.bucket, Key="archive/sent", Body=payload(size, seed=3))
    other = store.head("sent")
    assert other is not None and other.size == size and other.checksum not in result.checksums
    # a store asked for no checksum (request_checksums: when_required) keeps none the upload relies on
    plain = S3Store(s3_server.store_config(multipart_threshold=5 * MIB, part_size=5 * MIB,
                                           request_checksums="when_required"))
    assert plain.put("plain", pieces(data, 777_777)).checksums == frozenset()


def b64crc(crc32: int) -> str:
    return base64.b64encode(crc32.to_bytes(4, "big")).decode()


def test_pieces_are_streamed_from_one_ranged_get(s3_server: S3Server) -> None:
    store = open_store(s3_server.store_config())
    data = payload(3 * MIB + 5, seed=4)
    store.put("streamed", [data])
    sizes = [MIB, 1, MIB - 1, 100]
    assert list(store.get_pieces("streamed", 7, sizes)) == [data[7:7 + MIB], data[7 + MIB:8 + MIB],
                                                           data[8 + MIB:7 + 2 * MIB], data[7 + 2 * MIB:107 + 2 * MIB]]
    # past the object's end: the piece that crosses it comes short, and is the last
    got = list(store.get_pieces("streamed", 3 * MIB - 10, [10, 10, 10]))
    assert got == [data[3 * MIB - 10:3 * MIB], data[3 * MIB:]]
    with pytest.raises(ObjectMissing):
        list(store.get_pieces("nothing here", 0, [10]))


# ----------------------------------------------------------------------------- killed upload

_UPLOADER = """
import json, os, sys
from pathlib import Path
from relay.archive.store import S3Store, StoreConfig
settings = json.loads(sys.argv[1])
for key in ("access_key_id_file", "secret_access_key_file"):
    settings[key] = Path(settings[key])
store = S3Store(StoreConfig(**settings))
def parts():
    for number in range(1, 100):
        print(f"want {number}", flush=True)
        if number == 4:
            sys.stdin.read()  # hold here, parts 1-3 sent, until the test kills us
        yield os.urandom(5 << 20)
store.put("mysql-bin.000009.zst", parts())
"""


def _parts_stored(s3_server: S3Server) -> list[dict[str, object]]:
    """The parts the store holds of the one incomplete upload (none while it has not started)."""
    uploads = s3_server.incomplete_uploads()
    if not uploads:
        return []
    listed = s3_server.client().list_parts(Bucket=s3_server.bucket, Key=uploads[0]["Key"],
                                           UploadId=uploads[0]["UploadId"])
    parts: list[dict[str, object]] = listed.get("Parts", [])
    return parts


def test_a_killed_multipart_upload_leaves_no_object(s3_server: S3Server) -> None:
    config = s3_server.store_config(multipart_threshold=5 * MIB, part_size=5 * MIB)
    store = S3Store(config)
    store.put("mysql-bin.000009.zst", [b"the version archived before"])
    settings = {key: str(value) if isinstance(value, Path) else value for key, value in vars(config).items()}
    child = subprocess.Popen([sys.executable, "-c", _UPLOADER, json.dumps(settings)], cwd=REPO_ROOT,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == b"want 4":
                break
        else:
            pytest.fail(f"the uploader ended early with {child.wait()}")
        # parts go up several at once: kill it once two of them have landed
        wait_for(lambda: len(_parts_stored(s3_server)) >= 2, 30, "no part of the upload landed")
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(10)
    assert child.returncode == -signal.SIGKILL

    uploads = s3_server.incomplete_uploads()
    assert [upload["Key"] for upload in uploads] == ["archive/mysql-bin.000009.zst"]
    assert len(_parts_stored(s3_server)) >= 2  # it was well under way
    # the key still holds what was there before: the killed upload never became the object
    assert store.get_range("mysql-bin.000009.zst", 0, 100) == b"the version archived before"
    assert [item.name for item in store.list()] == ["mysql-bin.000009.zst"]

    restarted = S3Store(config)  # the next start cleans up
    assert restarted.abort_stale_uploads() == 1
    assert s3_server.incomplete_uploads() == []
    assert restarted.abort_stale_uploads() == 0


def test_clean_up_leaves_the_uploads_begun_since_its_cutoff(s3_server: S3Server) -> None:
    """Only the uploads begun before the cutoff, by the store's clock, are aborted."""
    store = S3Store(s3_server.store_config())
    begun = s3_server.client().create_multipart_upload(Bucket=s3_server.bucket, Key="archive/x")["UploadId"]
    initiated = s3_server.incomplete_uploads()[0]["Initiated"]
    # as S3 does (moto alone gives 2010-11-10 to every upload: relay/sandbox/motoserver.py)
    assert abs(initiated - dt.datetime.now(dt.UTC)) < dt.timedelta(minutes=1), "not the upload's real start"
    assert store.abort_stale_uploads(initiated_before=initiated) == 0
    assert [upload["UploadId"] for upload in s3_server.incomplete_uploads()] == [begun]
    assert store.abort_stale_uploads(initiated_before=initiated + dt.timedelta(seconds=1)) == 1
    assert s3_server.incomplete_uploads() == []


def test_clean_up_stays_in_its_prefix(s3_server: S3Server) -> None:
    client = s3_server.client()
    ours = client.create_multipart_upload(Bucket=s3_server.bucket, Key="archive/x")["UploadId"]
    theirs = client.create_multipart_upload(Bucket=s3_server.bucket, Key="other/x")["UploadId"]
    assert S3Store(s3_server.store_config()).abort_stale_uploads() == 1
    assert [upload["UploadId"] for upload in s3_server.incomplete_uploads()] == [theirs]
    assert ours != theirs


def test_clean_up_under_the_objects_leaves_an_archive_nested_in_the_prefix(s3_server: S3Server) -> None:
    client = s3_server.client()
    ours = client.create_multipart_upload(Bucket=s3_server.bucket, Key="archive/binlogs/x")["UploadId"]
    nested = client.create_multipart_upload(Bucket=s3_server.bucket, Key="archive/pod-1/binlogs/x")["UploadId"]
    assert S3Store(s3_server.store_config()).abort_stale_uploads("binlogs/") == 1
    assert [upload["UploadId"] for upload in s3_server.incomplete_uploads()] == [nested]
    assert ours != nested


# ----------------------------------------------------------------------------- refusals


def _assert_no_secret(message: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in message


def test_wrong_credentials(s3_server: S3Server) -> None:
    with s3_server.moto.checking_credentials():
        _check_wrong_credentials(s3_server)


def _check_wrong_credentials(s3_server: S3Server) -> None:
    S3Store(s3_server.store_config()).check()  # the right key passes
    key_file, secret_file = s3_server.credential_files(secret="not-the-secret-at-all")
    store = S3Store(s3_server.store_config(secret_access_key_file=secret_file, access_key_id_file=key_file))
    calls = [(store.check, "HTTP 403"),  # HEAD: no body, no error code
             (lambda: store.put("x", [b"data"]), "SignatureDoesNotMatch"),
             (lambda: store.get_range("x", 0, 1), "SignatureDoesNotMatch")]
    for call, said in calls:
        with pytest.raises(StoreAccessError, match=f"refused, check the credentials.*{said}") as caught:
            call()
        assert isinstance(caught.value, FatalError)
        _assert_no_secret(str(caught.value), "not-the-secret-at-all", s3_server.secret_access_key)

    key_file, secret_file = s3_server.credential_files(key_id="AKIANOSUCHKEY0000000", secret="some-secret-value")
    store = S3Store(s3_server.store_config(secret_access_key_file=secret_file, access_key_id_file=key_file))
    with pytest.raises(StoreAccessError, match="InvalidAccessKeyId") as caught:
        store.put("x", [b"data"])
    _assert_no_secret(str(caught.value), "some-secret-value")
    assert S3Store(s3_server.store_config()).head("x") is None  # nothing was stored with a wrong key

    with pytest.raises(StoreAccessError, match="cannot read it") as unreadable:
        S3Store(s3_server.store_config(secret_access_key_file=s3_server.secrets_dir / "missing"))
    assert "missing" in str(unreadable.value)


def _iam(s3_server: S3Server) -> Any:
    """moto's IAM, while its authentication is off (any key is accepted then)."""
    return boto3.client("iam", endpoint_url=s3_server.moto.endpoint, region_name=REGION,
                        aws_access_key_id="bootstrap", aws_secret_access_key="bootstrap")


def _replace_file(path: Path, value: str) -> None:
    """As Kubernetes updates a mounted Secret: the new file renamed over the old."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(value + "\n")
    fresh.rename(path)


def test_a_key_rotated_in_its_files_is_used_without_a_restart(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """An operator rotates the store's access key: the new key is written to the key files (the
    Secret updated) and the old one deleted.  The open store signs with the new key once it has
    read the files again, not with the deleted one until a restart; a file missing at a re-read
    (a Secret being replaced) leaves the key read before in use."""
    monkeypatch.setattr("relay.archive.store.KEY_FILES_REREAD_SECONDS", 1.0)
    iam = _iam(s3_server)
    user = f"rotating-{uuid.uuid4().hex[:8]}"
    iam.create_user(UserName=user)
    iam.put_user_policy(UserName=user, PolicyName="archive", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
    old, new = (iam.create_access_key(UserName=user)["AccessKey"] for _ in range(2))
    key_file, secret_file = s3_server.credential_files(old["AccessKeyId"], old["SecretAccessKey"])
    store = S3Store(s3_server.store_config(access_key_id_file=key_file, secret_access_key_file=secret_file))
    with s3_server.moto.checking_credentials():
        store.put("before", [b"signed with the old key"])
    iam.delete_access_key(UserName=user, AccessKeyId=old["AccessKeyId"])
    _replace_file(key_file, new["AccessKeyId"])
    _replace_file(secret_file, new["SecretAccessKey"])

    def stored_with_the_new_key() -> bool:
        try:
            store.put("after", [b"signed with the new key"])
        except StoreAccessError:
            return False
        return True

    with s3_server.moto.checking_credentials():
        wait_for(stored_with_the_new_key, 20, "the store never signed with the rotated key")
        key_file.unlink()

        def read_again_and_stored() -> bool:
            store.put("while-replaced", [b"still the new key"])  # a request: the key is read again before it
            return "the key read before is used" in caplog.text

        wait_for(read_again_and_stored, 20, "the key files were never read again")
        assert str(key_file) in caplog.text and new["SecretAccessKey"] not in caplog.text
    assert S3Store(s3_server.store_config()).head("while-replaced") is not None


def test_credentials_from_the_standard_chain(s3_server: S3Server, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """No key files: the environment, then a profile of the shared credentials file."""
    config = replace(s3_server.store_config(), access_key_id_file=None, secret_access_key_file=None)
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_server.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_server.secret_access_key)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    with s3_server.moto.checking_credentials():
        S3Store(config).put("from-environment", [b"1"])
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        (tmp_path / "credentials").write_text(f"[archive]\naws_access_key_id = {s3_server.access_key_id}\n"
                                              f"aws_secret_access_key = {s3_server.secret_access_key}\n")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
        S3Store(replace(config, profile="archive")).put("from-profile", [b"2"])
        with pytest.raises(StoreAccessError, match="could not be found"):
            S3Store(replace(config, profile="no-such-profile"))


def test_tls_is_verified_by_default(tmp_path: Path) -> None:
    """An HTTPS store whose certificate no trusted CA signed is refused (a FatalError, not retried),
    and accepted once its CA is given as ca_bundle."""
    from tests.support.s3 import start_moto  # here: the module is this file's plugin, imported by pytest

    certs = make_certs(tmp_path / "certs")
    moto = start_moto(tmp_path / "moto-tls.log", tls=certs)
    try:
        moto.client().create_bucket(Bucket="tls-bucket")
        key_file, secret_file = tmp_path / "key_id", tmp_path / "secret"
        key_file.write_text(moto.access_key_id)
        secret_file.write_text(moto.secret_access_key)
        config = StoreConfig("s3://tls-bucket/archive", endpoint_url=moto.endpoint, region="us-east-1",
                             access_key_id_file=key_file, secret_access_key_file=secret_file)
        with pytest.raises(StoreAccessError, match="TLS failed.*ca_bundle"):
            S3Store(config).check()
        store = S3Store(replace(config, ca_bundle=certs.ca))
        store.put("x", [b"over TLS"])
        assert store.get_range("x", 0, 8) == b"over TLS"
    finally:
        moto.stop()


def test_missing_bucket(s3_server: S3Server) -> None:
    store = S3Store(replace(s3_server.store_config(), url="s3://no-such-bucket-here/archive"))
    with pytest.raises(StoreAccessError, match="bucket 'no-such-bucket-here' does not exist"):
        store.check()
    with pytest.raises(StoreAccessError, match="bucket 'no-such-bucket-here' does not exist"):
        store.put("x", [b"data"])
    with pytest.raises(StoreAccessError, match="bucket 'no-such-bucket-here' does not exist"):
        list(store.list())


# ----------------------------------------------------------------------------- the store down


def test_store_refusing_connections_is_retryable_and_quick(s3_server: S3Server) -> None:
    store = S3Store(s3_server.store_config())  # the default 3 attempts: about 3 s of back-off
    store.put("mysql-bin.000001.zst", [b"kept while the store is down"])
    s3_server.proxy.refuse()
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="unreachable.*try again later"):
        store.get_range("mysql-bin.000001.zst", 0, 4)
    assert time.monotonic() - started < 10, "retries must give up within seconds"
    store = S3Store(s3_server.store_config(max_attempts=1))  # every other call, without the back-off
    for call in (store.check, lambda: store.put("mysql-bin.000002.zst", [b"x"]), lambda: list(store.list()),
                 lambda: store.head("mysql-bin.000001.zst"), lambda: store.delete("mysql-bin.000001.zst"),
                 store.abort_stale_uploads):
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="unreachable.*try again later") as caught:
            call()
        assert time.monotonic() - started < 10, "retries must give up within seconds"
        assert isinstance(caught.value, RetryableError)
    s3_server.proxy.accept()
    assert store.get_range("mysql-bin.000001.zst", 0, 4) == b"kept"  # the data survived the outage


def test_store_dropping_connections_is_retryable(s3_server: S3Server) -> None:
    store = S3Store(s3_server.store_config(max_attempts=2))
    store.put("a", [b"abc"])
    upstream = s3_server.proxy.upstream_port
    s3_server.proxy.upstream_port = 1  # nothing listens there: each connection is accepted, then closed
    s3_server.proxy.drop_connections()
    with pytest.raises(StoreUnavailable, match="try again later"):
        store.get_range("a", 0, 3)
    s3_server.proxy.upstream_port = upstream
    assert store.get_range("a", 0, 3) == b"abc"


def test_a_hung_store_times_out(s3_server: S3Server) -> None:
    store = S3Store(s3_server.store_config(read_timeout=1.0, connect_timeout=1.0, max_attempts=2))
    store.put("a", [b"abc"])
    s3_server.proxy.blackhole()
    s3_server.proxy.drop_connections()  # the pooled connection too: every request meets the silence
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="unreachable|timeout|timed out"):
        store.get_range("a", 0, 3)
    assert time.monotonic() - started < 10
    s3_server.proxy.heal()
    assert store.get_range("a", 0, 3) == b"abc"
