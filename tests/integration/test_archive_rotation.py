"""Key rotation of an encrypted archive (`binlog-relay archive --config FILE --rewrap`) against a
real S3 API server (moto in server mode, tests/support/s3.py): each archived file is handled on
its own, so a file that cannot be re-wrapped (under a key that is not configured, its wrapped key
or its meta document damaged) is named with the reason and the run goes on to re-wrap the others,
exiting 1; a file deleted by archive.retention while the rotation runs is skipped, not an error.
And a configuration with old keys but no current key is refused: new files are never encrypted
with an old key."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from relay.archive.keys import read_kek
from relay.archive.objectformat import ArchiveKeyError, Envelope, Kek
from relay.archive.objects import (
    ArchivedFileReader,
    delete_archived,
    list_archive,
    meta_key,
    object_key,
    read_meta,
    upload,
)
from relay.archive.rotation import rewrap_archive
from relay.archive.store import MIB, S3Store
from relay.config import ConfigError, load_config
from relay.sandbox.ports import LOOPBACK, free_port
from tests.support.s3 import REGION

if TYPE_CHECKING:
    from tests.support.s3 import S3Server

PREFIX = "relay"


def store_of(s3_server: S3Server) -> S3Store:
    return S3Store(s3_server.store_config(prefix=PREFIX, multipart_threshold=5 * MIB, part_size=5 * MIB))


def key_file(path: Path) -> Path:
    path.write_text(os.urandom(32).hex() + "\n")
    return path


def archived(store: S3Store, tmp_path: Path, name: str, kek: Kek | None, seed: int) -> bytes:
    """A file of binlog-like bytes uploaded as ``name`` (under ``kek``, or plain); its bytes."""
    rng = random.Random(seed)
    data = b"".join(rng.randbytes(rng.randrange(4, 40)) * 20 for _ in range(3000))
    source = tmp_path / "sources" / name
    source.parent.mkdir(exist_ok=True)
    source.write_bytes(data)
    upload(store, source, name, kek=kek, chunk_size=64 * 1024, workers=1)
    return data


def relay_config(s3_server: S3Server, tmp_path: Path, **archive: Any) -> Path:
    """A relay's configuration with an archive on the test's bucket (`--rewrap` reads only the
    archive section, but the file must be a whole, valid configuration)."""
    key_id, secret = s3_server.credential_files()
    config = {"server_id": 1001, "data_dir": str(tmp_path / "data"),
              "upstream": {"host": LOOPBACK, "port": free_port(), "user": "repl", "password": "repl"},
              "listen": {"host": LOOPBACK, "port": free_port()},
              "archive": {"url": f"s3://{s3_server.bucket}/{PREFIX}", "endpoint_url": s3_server.endpoint,
                          "region": REGION, "access_key_id_file": str(key_id),
                          "secret_access_key_file": str(secret), **archive}}
    path = tmp_path / "relay.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def rewrap(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "relay.cli", "archive", "--config", str(config), "--rewrap"],
                          capture_output=True, text=True, timeout=120)


def reasons(stdout: str) -> dict[str, str]:
    """The files the summary names as not re-wrapped, with the reason each."""
    named = {}
    for line in stdout.splitlines():
        if line.startswith("  ") and ": " in line:
            name, reason = line.strip().split(": ", 1)
            named[name] = reason
    return named


def test_rewrap_goes_on_past_files_it_cannot_rewrap_names_them_and_exits_1(
        s3_server: S3Server, tmp_path: Path) -> None:
    old_path, new_path, stranger_path = (key_file(tmp_path / f"{which}.key") for which in ("old", "new", "stranger"))
    old, new, stranger = read_kek(str(old_path)), read_kek(str(new_path)), read_kek(str(stranger_path))
    store = store_of(s3_server)
    names = [f"mysql-bin.{n:06d}" for n in range(1, 8)]
    under = {names[1]: stranger, names[5]: None}  # a key that is not configured; a plain file
    data = {name: archived(store, tmp_path, name, under.get(name, old), seed) for seed, name in enumerate(names)}
    # the wrapped data key of one file damaged (its meta still parses, and names the old key)
    meta = read_meta(store, names[2])
    assert meta.encryption is not None
    wrapped = bytearray(meta.encryption.wrapped_key)
    wrapped[3] ^= 0x10
    store.put(meta_key(names[2]), [replace(meta, encryption=Envelope(old.key_id, bytes(wrapped))).to_json()])
    # another's meta document edited: it does not parse
    document = json.loads(read_meta(store, names[4]).to_json())
    document["file_size"] += 1
    store.put(meta_key(names[4]), [json.dumps(document).encode()])

    config = relay_config(s3_server, tmp_path, encryption_key_file=str(new_path),
                          old_encryption_key_files=[str(old_path)])
    first = rewrap(config)
    assert first.returncode == 1, first.stdout + first.stderr
    good = [names[0], names[3], names[6]]
    assert [line.split(": ")[1].split(" ")[0] for line in first.stderr.splitlines()
            if line.startswith("re-wrapped ")] == good, first.stderr
    assert "re-wrapped 3 file(s); 0 were under the current key already, 1 are not encrypted; " \
           "3 not re-wrapped" in first.stdout, first.stdout
    named = reasons(first.stdout)
    assert sorted(named) == [names[1], names[2], names[4]], first.stdout
    assert stranger.key_id in named[names[1]] and "not configured" in named[names[1]], named
    assert "does not unwrap" in named[names[2]], named
    assert "meta document is damaged" in named[names[4]], named
    for name in good:  # opened by the new key alone, byte for byte; no longer by the old
        reader = ArchivedFileReader(store, name, [new])
        assert reader.read(0, reader.size) == data[name]
        with pytest.raises(ArchiveKeyError):
            ArchivedFileReader(store, name, [old])
    reader = ArchivedFileReader(store, names[5], [])
    assert reader.read(0, reader.size) == data[names[5]]  # a plain file is left as it is

    # run again: the same three named, the others only checked
    second = rewrap(config)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "re-wrapped 0 file(s); 3 were under the current key already, 1 are not encrypted; " \
           "3 not re-wrapped" in second.stdout, second.stdout
    assert sorted(reasons(second.stdout)) == [names[1], names[2], names[4]]

    # with the stranger's key configured too and the two damaged files gone, the rotation finishes
    delete_archived(store, names[2])
    delete_archived(store, names[4])
    config = relay_config(s3_server, tmp_path, encryption_key_file=str(new_path),
                          old_encryption_key_files=[str(old_path), str(stranger_path)])
    third = rewrap(config)
    assert third.returncode == 0, third.stdout + third.stderr
    assert "re-wrapped 1 file(s); 3 were under the current key already, 1 are not encrypted" in third.stdout
    assert "not re-wrapped" not in third.stdout
    reader = ArchivedFileReader(store, names[1], [new])
    assert reader.read(0, reader.size) == data[names[1]]


class RetentionMeanwhile(S3Store):
    """The real store, where archive.retention deletes a file just before the rotation fetches its
    meta (``before_read``), or just after it fetched it (``after_read``: the re-wrapped meta is then
    stored after the file was deleted)."""

    before_read: str | None = None
    after_read: str | None = None

    def get(self, name: str, *args: Any, **kwargs: Any) -> bytes:
        if self.before_read is not None and name == meta_key(self.before_read):
            delete_archived(self, self.before_read)
            self.before_read = None
        data: bytes = super().get(name, *args, **kwargs)
        if self.after_read is not None and name == meta_key(self.after_read):
            delete_archived(self, self.after_read)
            self.after_read = None
        return data


def test_rewrap_skips_a_file_deleted_by_retention_while_it_runs(s3_server: S3Server, tmp_path: Path) -> None:
    old_path, new_path = key_file(tmp_path / "old.key"), key_file(tmp_path / "new.key")
    old, new = read_kek(str(old_path)), read_kek(str(new_path))
    store = RetentionMeanwhile(s3_server.store_config(prefix=PREFIX))
    names = [f"mysql-bin.{n:06d}" for n in range(1, 6)]
    for seed, name in enumerate(names):
        archived(store, tmp_path, name, old, seed)
    store.before_read, store.after_read = names[1], names[3]
    lines: list[str] = []
    result = rewrap_archive(s3_server.store_config(prefix=PREFIX), (new, old), lines.append,
                            open_store_for=lambda _: store)
    assert result.rewrapped == (names[0], names[2], names[4]), lines
    assert result.deleted == (names[1], names[3]) and not result.failed, result
    assert sorted(list_archive(store)) == [names[0], names[2], names[4]]
    # no meta document stored again for a file deleted meanwhile (it would name an object that is gone)
    for name in (names[1], names[3]):
        assert store.head(meta_key(name)) is None and store.head(object_key(name)) is None
    for name in result.rewrapped:
        ArchivedFileReader(store, name, [new])


def test_old_keys_without_a_current_key_are_refused(s3_server: S3Server, tmp_path: Path) -> None:
    """encryption_key_file null means new files are not encrypted: old_encryption_key_files alone
    would have encrypted them with an old key (and let --rewrap "rotate" to it); refused, naming
    both keys."""
    old_path = key_file(tmp_path / "old.key")
    store = store_of(s3_server)
    archived(store, tmp_path, "mysql-bin.000001", read_kek(str(old_path)), 1)
    config = relay_config(s3_server, tmp_path, encryption_key_file=None, old_encryption_key_files=[str(old_path)])
    with pytest.raises(ConfigError) as refused:
        load_config(config)
    [error] = [line for line in refused.value.errors if "old_encryption_key_files" in line]
    assert "encryption_key_file" in error.replace("old_encryption_key_files", ""), error
    done = rewrap(config)
    assert done.returncode == 2 and "old_encryption_key_files" in done.stderr, done.stdout + done.stderr
    # a current key with old ones, or no key at all, are still fine
    load_config(relay_config(s3_server, tmp_path, encryption_key_file=str(key_file(tmp_path / "new.key")),
                             old_encryption_key_files=[str(old_path)]))
    load_config(relay_config(s3_server, tmp_path))
