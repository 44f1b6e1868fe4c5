"""The archived object format (relay/archive/objectformat.py), with bytes only: round trips of files
of every awkward size with and without encryption, any (offset, length) read back exactly, every
kind of damage detected with the right error and never wrong bytes, the real `zstd -d` reading an
unencrypted object, key rotation rewriting only the meta document, and (printed, not asserted) the
compression ratio and CPU cost on a real sysbench binlog when a benchmark sandbox left one."""

from __future__ import annotations

import io
import os
import random
import struct
import subprocess
import zlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
import zstandard
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import aes_key_unwrap
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.archive.objectformat import (
    DEFAULT_CHUNK_SIZE,
    TRAILER_PROBE,
    ArchiveDamaged,
    ArchiveError,
    ArchiveKeyError,
    ArchiveUnsupported,
    Kek,
    ObjectLayout,
    ObjectMeta,
    ObjectReader,
    ObjectWriter,
    load_kek,
    rewrap,
    trailer_length,
)
from relay.errors import InputError, Refusal

CHUNK = 4096
KEK = load_kek(bytes(range(32)), "test kek")
OTHER_KEK = load_kek(bytes(range(100, 132)), "other kek")


def binlog_like(size: int, seed: int = 1) -> bytes:
    """Bytes that compress about as a binlog does: repeated structure with random values in it."""
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        out += b"\x00\x01\x02\x03table_map sbtest1 id k c pad" + rng.randbytes(rng.randrange(4, 60))
    return bytes(out[:size])


def archive(data: bytes, *, chunk_size: int = CHUNK, kek: Kek | None = None, piece: int = 1000,
            name: str = "mysql-bin.000001") -> tuple[bytes, ObjectMeta]:
    """The object and meta document of ``data``, fed to the writer ``piece`` bytes at a time."""
    writer = ObjectWriter(name, chunk_size=chunk_size, kek=kek)
    out: list[bytes] = []
    for start in range(0, len(data), piece):
        out += writer.write(data[start:start + piece])
    out.append(writer.finish())
    assert writer.meta is not None
    return b"".join(out), writer.meta


def open_object(obj: bytes, meta: ObjectMeta | None, keks: Sequence[Kek] = ()) -> ObjectReader:
    """What a reader does with ranged GETs: the probe of the tail, more if the trailer is longer."""
    tail = obj[-TRAILER_PROBE:]
    needed = trailer_length(tail, len(obj), "archive/mysql-bin.000001")
    if needed > len(tail):
        tail = obj[-needed:]
    return ObjectReader(ObjectLayout.parse(tail, len(obj), "archive/mysql-bin.000001"), meta, keks)


def read(reader: ObjectReader, obj: bytes, offset: int, length: int) -> bytes:
    """File bytes [offset, offset+length) through frames_for and decode_frame, one GET per frame."""
    out = []
    for frame in reader.layout.frames_for(offset, length):
        chunk = decode(reader, frame.index, obj[frame.object_start:frame.object_end])
        out.append(frame.piece(chunk, offset, length))
    return b"".join(out)


def decode(reader: ObjectReader, index: int, data: bytes) -> bytes:
    """decode_frame's chunk, and decode_frame_to agreeing with it: the same bytes in order, or the
    same kind of error."""
    streamed = bytearray()

    def write(piece: bytes, offset: int) -> None:
        assert offset == len(streamed)
        streamed.extend(piece)

    try:
        chunk = reader.decode_frame(index, data)
    except ArchiveError as exc:
        with pytest.raises(type(exc)):
            reader.decode_frame_to(index, data, write)
        raise
    reader.decode_frame_to(index, data, write)
    assert streamed == chunk
    return chunk


def read_all(obj: bytes, meta: ObjectMeta | None, keks: Sequence[Kek] = ()) -> bytes:
    reader = open_object(obj, meta, keks)
    return read(reader, obj, 0, reader.layout.info.file_size)


def keks_for(kek: Kek | None) -> list[Kek]:
    return [] if kek is None else [kek]


# ----------------------------------------------------------------------------- round trips

SIZES = [0, 1, 100, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK, 7 * CHUNK + 13, 20 * CHUNK + 4093]


# fed a byte at a time (the small sizes only), in odd pieces, a chunk at a time, many chunks at once
PIECES = [(size, piece) for size in SIZES for piece in (1, 777, CHUNK, 10 * CHUNK) if piece > 1 or size <= 3 * CHUNK]


@pytest.mark.parametrize("kek", [None, KEK], ids=["plain", "encrypted"])
@pytest.mark.parametrize(("size", "piece"), PIECES)
def test_round_trip(size: int, kek: Kek | None, piece: int) -> None:
    data = binlog_like(size)
    obj, meta = archive(data, kek=kek, piece=piece)
    assert len(obj) == meta.object_size
    assert (meta.file_size, meta.frames) == (size, -(-size // CHUNK))
    assert read_all(obj, ObjectMeta.from_json(meta.to_json(), "meta"), keks_for(kek)) == data
    if kek is None:  # an unencrypted object reads without its meta too
        assert read_all(obj, None) == data
    else:
        assert data[:64] not in obj or size < 64


@pytest.mark.parametrize("kek", [None, KEK], ids=["plain", "encrypted"])
def test_default_chunk_size(kek: Kek | None) -> None:
    data = binlog_like(2 * DEFAULT_CHUNK_SIZE + 12345, seed=7)
    obj, meta = archive(data, chunk_size=DEFAULT_CHUNK_SIZE, kek=kek, piece=1 << 20)
    assert meta.frames == 3
    reader = open_object(obj, meta, keks_for(kek))
    assert read(reader, obj, DEFAULT_CHUNK_SIZE - 10, 20) == data[DEFAULT_CHUNK_SIZE - 10:DEFAULT_CHUNK_SIZE + 10]
    assert read(reader, obj, 0, len(data)) == data


def test_a_chunk_is_decoded_into_its_place_in_pieces() -> None:
    """decode_frame_to hands a 4 MiB chunk over in pieces (what the fetch writes into the copy
    without holding the chunk), which make up the chunk exactly."""
    data = binlog_like(DEFAULT_CHUNK_SIZE)
    obj, meta = archive(data, chunk_size=DEFAULT_CHUNK_SIZE, piece=DEFAULT_CHUNK_SIZE)
    reader = open_object(obj, meta)
    frame = reader.layout.frames[0]
    copy = bytearray(len(data))
    sizes = []

    def write(piece: bytes, offset: int) -> None:
        copy[offset:offset + len(piece)] = piece
        sizes.append(len(piece))

    reader.decode_frame_to(0, obj[frame.object_start:frame.object_end], write)
    assert copy == data and sum(sizes) == len(data)
    assert len(sizes) > 8 and max(sizes) <= DEFAULT_CHUNK_SIZE // 8


def test_a_frame_leaves_as_soon_as_its_chunk_is_full() -> None:
    """An uploader streams the object while the file is read: nothing waits for finish()."""
    writer = ObjectWriter("f", chunk_size=CHUNK)
    assert writer.write(b"a" * (CHUNK - 1)) == []
    frames = writer.write(b"ab")
    assert len(frames) == 1 and writer.object_size == len(frames[0])
    assert len(writer.write(b"b" * (5 * CHUNK))) == 5  # one big piece: every full chunk at once
    with pytest.raises(ValueError):
        ObjectWriter("f", chunk_size=0)


def test_trailer_longer_than_the_probe() -> None:
    """A seek table longer than TRAILER_PROBE (many frames) is found with a second ranged read."""
    data = binlog_like(8000 * 16)
    obj, meta = archive(data, chunk_size=16, piece=1 << 16)
    tail = obj[-TRAILER_PROBE:]
    needed = trailer_length(tail, len(obj), "o")
    assert needed > TRAILER_PROBE
    with pytest.raises(ValueError):
        ObjectLayout.parse(tail, len(obj), "o")
    reader = ObjectReader(ObjectLayout.parse(obj[-needed:], len(obj), "o"), meta)
    assert read(reader, obj, 70_001, 333) == data[70_001:70_334]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.integers(0, 12_000),
    chunk_size=st.integers(1, 3000),
    piece=st.integers(1, 5000),
    encrypted=st.booleans(),
    reads=st.lists(st.tuples(st.integers(0, 13_000), st.integers(0, 13_000)), min_size=1, max_size=8),
)
def test_any_offset_and_length(size: int, chunk_size: int, piece: int, encrypted: bool,
                               reads: list[tuple[int, int]]) -> None:
    kek = KEK if encrypted else None
    data = binlog_like(size, seed=size)
    obj, meta = archive(data, chunk_size=chunk_size, kek=kek, piece=piece)
    reader = open_object(obj, meta, keks_for(kek))
    for offset, length in reads:
        frames = reader.layout.frames_for(offset, length)
        assert read(reader, obj, offset, length) == data[offset:offset + length]
        if offset < size and length:  # only the frames that cover the range
            assert frames[0].file_start <= offset < frames[0].file_end
            assert frames[-1].file_end >= min(offset + length, size) > frames[-1].file_start


# ----------------------------------------------------------------------------- the layout


@pytest.mark.parametrize("kek", [None, KEK], ids=["plain", "encrypted"])
def test_the_documented_byte_layout(kek: Kek | None) -> None:
    """The module docstring's layout, read here without the module's parser: an independent
    reader (another language's, a DBA's script) can rely on it."""
    name = "mysql-bin.000042"
    data = binlog_like(2 * CHUNK + 100)
    obj, meta = archive(data, kek=kek, name=name)
    count, descriptor, magic = struct.unpack_from("<IBI", obj, len(obj) - 9)
    entry = 12 if kek is None else 8
    assert (count, descriptor, magic) == (4, 0x80 if kek is None else 0, 0x8F92EAB1)
    seek_start = len(obj) - (8 + count * entry + 9)
    assert struct.unpack_from("<II", obj, seek_start) == (0x184D2A5E, count * entry + 9)
    entries = [struct.unpack_from("<III" if kek is None else "<II", obj, seek_start + 8 + i * entry)
               for i in range(count)]
    info_size = entries[-1][0]
    assert entries[-1][1] == 0 and info_size == 8 + 61 + len(name)
    info = seek_start - info_size
    assert struct.unpack_from("<II", obj, info) == (0x184D2A5A, 61 + len(name))
    magic4, version, cipher, reserved, object_id, chunk_size, file_size, frames, length = \
        struct.unpack_from("<4sBBH16sIQIB", obj, info + 8)
    assert (magic4, version, cipher, reserved) == (b"BRLA", 1, 0 if kek is None else 1, 0)
    assert (object_id, chunk_size, file_size, frames) == (meta.object_id, CHUNK, len(data), 3)
    assert obj[info + 49:info + 49 + length].decode() == name
    tail_crc = struct.unpack_from("<I", obj, info + 65 + length)[0]
    table = obj[seek_start + 8:seek_start + 8 + 3 * entry]
    assert tail_crc == zlib.crc32(obj[info + 8:info + 65 + length] + table + obj[-9:-4])

    key = None if kek is None or meta.encryption is None else aes_key_unwrap(kek.key, meta.encryption.wrapped_key)
    offset, out = 0, b""
    for index, fields in enumerate(entries[:-1]):
        frame = obj[offset:offset + fields[0]]
        if key is not None:
            nonce = b"\0\0\0\0" + index.to_bytes(8, "big")
            frame = AESGCM(key).decrypt(nonce, frame, b"BRLA\x01" + object_id + struct.pack("<II", index, fields[1]))
        else:
            assert fields[2] == struct.unpack("<I", frame[-4:])[0]  # zstd's XXH64 low 32 bits
        out += zstandard.ZstdDecompressor().decompress(frame)
        offset += fields[0]
    assert out == data and offset == info


# ----------------------------------------------------------------------------- plain zstd


def test_zstandard_reads_an_unencrypted_object_as_a_stream_of_frames() -> None:
    data = binlog_like(10 * CHUNK + 5)
    obj, _ = archive(data)
    reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(obj), read_across_frames=True)
    assert reader.read() == data  # the info and seek table frames are skippable frames


@pytest.mark.parametrize("size", [0, 10 * CHUNK + 5])
def test_the_zstd_command_decompresses_an_unencrypted_object(tmp_path: Path, size: int) -> None:
    data = binlog_like(size)
    obj, _ = archive(data)
    (tmp_path / "mysql-bin.000001.zst").write_bytes(obj)
    subprocess.run(["zstd", "-q", "-d", str(tmp_path / "mysql-bin.000001.zst")], check=True, timeout=60)
    assert (tmp_path / "mysql-bin.000001").read_bytes() == data
    test = subprocess.run(["zstd", "-t", str(tmp_path / "mysql-bin.000001.zst")], capture_output=True, timeout=60)
    assert test.returncode == 0, test.stderr


# ----------------------------------------------------------------------------- damage


def flipped(data: bytes, position: int, mask: int = 0x01) -> bytes:
    damaged = bytearray(data)
    damaged[position] ^= mask
    return bytes(damaged)


def outcome(obj: bytes, meta: ObjectMeta | None, keks: Sequence[Kek], original: bytes) -> type[BaseException] | None:
    """The error reading every byte raised, or None when the bytes read are exactly the original
    ones (any other bytes fail the test: damage must never come back as data)."""
    try:
        got = read_all(obj, meta, keks)
    except ArchiveError as exc:
        assert isinstance(exc, Refusal)
        assert "mysql-bin.000001" in str(exc)
        return type(exc)
    assert got == original, "damaged data came back as data"
    return None


@pytest.mark.parametrize("kek", [None, KEK], ids=["plain", "encrypted"])
def test_every_flipped_byte_is_detected(kek: Kek | None) -> None:
    """Flip one bit of every byte of a small object, frames and trailer alike: each read fails with
    ArchiveDamaged (the seek table and info frame at parse time, a frame when it is decoded)."""
    data = binlog_like(3 * 256 + 100)
    obj, meta = archive(data, chunk_size=256, kek=kek)
    keks = keks_for(kek)
    trailer_start = meta.object_size - open_object(obj, meta, keks).layout.trailer_size
    for mask in (0x01, 0x80):
        for position in range(len(obj)):
            result = outcome(flipped(obj, position, mask), meta, keks, data)
            assert result is ArchiveDamaged, (position, trailer_start, mask, result)


def test_a_flipped_byte_names_the_frame_and_its_file_bytes() -> None:
    data = binlog_like(5 * CHUNK)
    for kek in (None, KEK):
        obj, meta = archive(data, kek=kek)
        reader = open_object(obj, meta, keks_for(kek))
        frame = reader.layout.frames[3]
        damaged = flipped(obj, frame.object_start + frame.compressed_size // 2)
        with pytest.raises(ArchiveDamaged, match=rf"frame 3 \(bytes {3 * CHUNK} to {4 * CHUNK} of") as caught:
            reader.decode_frame(3, damaged[frame.object_start:frame.object_end])
        assert caught.value.frame == 3
        assert read(reader, damaged, 0, 3 * CHUNK) == data[:3 * CHUNK]  # the other frames still read


@pytest.mark.parametrize("kek", [None, KEK], ids=["plain", "encrypted"])
@pytest.mark.parametrize("times", [None, (1795615378, 1795615444)], ids=["no-times", "times"])
def test_every_flipped_byte_of_the_meta_document_is_detected(kek: Kek | None, times: tuple[int, int] | None) -> None:
    data = binlog_like(2 * CHUNK + 1)
    obj, meta = archive(data, kek=kek)
    meta = replace(meta, commit_times=times)
    document = meta.to_json()
    version_digit = document.index(b'"archive_format":') + len(b'"archive_format":')
    for position in range(len(document)):
        for mask in (0x01, 0x02, 0x40):
            try:
                result = outcome(obj, ObjectMeta.from_json(flipped(document, position, mask), "m"), keks_for(kek), data)
            except ArchiveError as exc:
                result = type(exc)
            expected = ArchiveUnsupported if position == version_digit and result is not ArchiveDamaged \
                else ArchiveDamaged
            assert result is expected, (position, chr(document[position]), mask, result)


def test_commit_times_travel_in_the_meta_document_and_only_when_known() -> None:
    _, meta = archive(binlog_like(CHUNK + 1))
    assert b"commit_times" not in meta.to_json()  # a meta of a file without them keeps its bytes
    timed = replace(meta, commit_times=(1795615378, 1795615444))
    assert ObjectMeta.from_json(timed.to_json(), "m") == timed
    assert ObjectMeta.from_json(meta.to_json(), "m").commit_times is None
    # the check ties them to their object: another object's times do not pass
    def times_of(document: bytes) -> bytes:
        start = document.index(b'"commit_times":')
        return document[start:document.index(b"]", start) + 1]

    other = replace(timed, object_id=bytes(16))
    swapped = timed.to_json().replace(times_of(timed.to_json()), times_of(other.to_json()))
    assert swapped != timed.to_json()
    with pytest.raises(ArchiveDamaged):
        ObjectMeta.from_json(swapped, "m")


@pytest.mark.parametrize("kek", [None, KEK], ids=["plain", "encrypted"])
def test_a_truncated_object_is_detected(kek: Kek | None) -> None:
    data = binlog_like(4 * CHUNK + 99)
    obj, meta = archive(data, kek=kek)
    for cut in [0, 1, 20, 100, len(obj) // 2, len(obj) - 200, len(obj) - 30, len(obj) - 1]:
        with pytest.raises(ArchiveDamaged):
            open_object(obj[:cut], meta, keks_for(kek))
    reader = open_object(obj, meta, keks_for(kek))
    frame = reader.layout.frames[1]
    with pytest.raises(ArchiveDamaged, match="short read"):  # a frame cut short by the caller
        reader.decode_frame(1, obj[frame.object_start:frame.object_end - 1])
    # a whole frame left out of the middle, the trailer intact: the sizes no longer add up
    with pytest.raises(ArchiveDamaged, match="cut short or grown"):
        open_object(obj[:frame.object_start] + obj[frame.object_end:], meta, keks_for(kek))


@pytest.mark.parametrize("kek", [None, KEK], ids=["plain", "encrypted"])
def test_swapped_frames_are_detected(kek: Kek | None) -> None:
    """Frames of one size (incompressible chunks) swapped in an object, or taken from another object
    at the same place: the seek table's checksum (plain) or the GCM tag with its associated data
    (encrypted) refuses them."""
    data = os.urandom(4 * CHUNK)
    obj, meta = archive(data, kek=kek)
    reader = open_object(obj, meta, keks_for(kek))
    first, second = reader.layout.frames[0], reader.layout.frames[2]
    assert first.compressed_size == second.compressed_size
    swapped = (obj[second.object_start:second.object_end] + obj[first.object_end:second.object_start]
               + obj[first.object_start:first.object_end] + obj[second.object_end:])
    assert outcome(swapped, meta, keks_for(kek), data) is ArchiveDamaged
    for index in (0, 2):
        frame = reader.layout.frames[index]
        with pytest.raises(ArchiveDamaged, match=f"frame {index}"):
            reader.decode_frame(index, swapped[frame.object_start:frame.object_end])

    other, other_meta = archive(os.urandom(4 * CHUNK), kek=kek)
    graft = other[:first.object_end] + obj[first.object_end:]  # frame 0 of another object
    with pytest.raises(ArchiveDamaged, match="frame 0"):
        reader.decode_frame(0, graft[first.object_start:first.object_end])
    with pytest.raises(ArchiveDamaged, match="describes another object"):
        open_object(obj, other_meta, keks_for(kek))  # the meta of another object


def forge_cut(obj: bytes, keep: int) -> bytes:
    """The object cut to its first ``keep`` frames with a trailer rewritten to match, CRC and all:
    what someone without the data key can do (the trailer tag stays the old one)."""
    count, descriptor, _ = struct.unpack_from("<IBI", obj, len(obj) - 9)
    entry = 12 if descriptor & 0x80 else 8
    seek_start = len(obj) - (8 + count * entry + 9)
    entries = [obj[seek_start + 8 + i * entry:seek_start + 8 + (i + 1) * entry] for i in range(count)]
    info_start = seek_start - struct.unpack_from("<I", entries[-1])[0]
    content = bytearray(obj[info_start + 8:seek_start])
    kept = entries[:keep]
    frames_end = sum(struct.unpack_from("<I", item)[0] for item in kept)
    struct.pack_into("<QI", content, 28, sum(struct.unpack_from("<I", item, 4)[0] for item in kept), keep)
    footer = struct.pack("<IBI", keep + 1, descriptor, 0x8F92EAB1)
    struct.pack_into("<I", content, len(content) - 4, zlib.crc32(bytes(content[:-4]) + b"".join(kept) + footer[:5]))
    info = obj[info_start:info_start + 8] + bytes(content)
    table = b"".join(kept) + entries[-1]
    return obj[:frames_end] + info + struct.pack("<II", 0x184D2A5E, len(table) + 9) + table + footer


def test_a_consistently_rewritten_trailer() -> None:
    """Unencrypted objects carry no secret, so a trailer rewritten with care (frames dropped, CRC
    recomputed) reads as the shorter file it now describes, as any .zst file would; the meta
    document still tells (its sizes differ).  Encrypted ones refuse it: the trailer tag needs the key."""
    data = binlog_like(3 * CHUNK)
    plain, plain_meta = archive(data)
    assert read_all(forge_cut(plain, 2), None) == data[:2 * CHUNK]
    with pytest.raises(ArchiveDamaged, match="describes another object"):
        read_all(forge_cut(plain, 2), plain_meta)
    encrypted, meta = archive(data, kek=KEK)
    forged = forge_cut(encrypted, 2)
    ObjectLayout.parse(forged[-TRAILER_PROBE:], len(forged), "o")  # its structure and CRC hold...
    forged_meta = replace(meta, object_size=len(forged), file_size=2 * CHUNK, frames=2)
    with pytest.raises(ArchiveDamaged, match="trailer fails authentication"):
        open_object(forged, forged_meta, [KEK])  # ...but not its tag, even with a meta to match


def test_a_wrong_key_is_told_apart_from_damage() -> None:
    data = binlog_like(3 * CHUNK)
    obj, meta = archive(data, kek=KEK)
    with pytest.raises(ArchiveKeyError, match=f"encrypted with KEK {KEK.key_id}, which is not configured "
                                              rf"\(configured: {OTHER_KEK.key_id}\)") as caught:
        open_object(obj, meta, [OTHER_KEK])
    assert isinstance(caught.value, Refusal)
    with pytest.raises(ArchiveKeyError, match=r"configured: none"):
        open_object(obj, meta, [])
    assert read_all(obj, meta, [OTHER_KEK, KEK]) == data  # the one the meta names is picked
    # the key the meta names is there but does not open the wrapped key: that is damage
    impostor = Kek(OTHER_KEK.key, KEK.key_id)
    with pytest.raises(ArchiveDamaged, match="does not unwrap with KEK"):
        open_object(obj, meta, [impostor])
    with pytest.raises(ValueError, match="is encrypted"):
        open_object(obj, None)


def test_no_key_material_in_errors_or_reprs() -> None:
    data = binlog_like(CHUNK)
    obj, meta = archive(data, kek=KEK)
    messages = [repr(KEK), repr(meta), str(meta.encryption)]
    for keks in ([OTHER_KEK], [Kek(OTHER_KEK.key, KEK.key_id)]):
        with pytest.raises(ArchiveError) as caught:
            open_object(obj, meta, keks)
        messages.append(str(caught.value))
    with pytest.raises(InputError) as bad:
        load_kek(b"secret-material-that-is-not-32-bytes", "/run/secrets/kek")
    messages.append(str(bad.value))
    assert "/run/secrets/kek" in messages[-1]
    for text in messages:
        for secret in (KEK.key, OTHER_KEK.key):
            assert secret.hex() not in text and repr(secret) not in text and secret.hex().upper() not in text
        assert "secret-material" not in text


def test_load_kek() -> None:
    raw = os.urandom(32)
    assert load_kek(raw, "f").key == raw
    assert load_kek(raw.hex().encode() + b"\n", "f") == load_kek(raw, "f")
    assert load_kek(raw, "f").key_id.startswith("sha256:") and len(load_kek(raw, "f").key_id) == 23
    assert load_kek(raw, "f").key_id != load_kek(os.urandom(32), "f").key_id
    for bad in (b"", raw[:31], raw + b"\n", b"z" * 64):
        with pytest.raises(InputError, match="expected 32 raw bytes or 64 hex digits"):
            load_kek(bad, "f")


# ----------------------------------------------------------------------------- rotation


def test_rotation_rewrites_only_the_meta_document() -> None:
    data = binlog_like(5 * CHUNK + 3)
    obj, meta = archive(data, kek=KEK)
    rotated = rewrap(meta, [KEK], OTHER_KEK)
    assert rotated.encryption is not None and rotated.encryption.kek_id == OTHER_KEK.key_id
    assert (rotated.object_id, rotated.object_size, rotated.file_size) == (meta.object_id, meta.object_size,
                                                                             meta.file_size)
    stored = ObjectMeta.from_json(rotated.to_json(), "m")
    assert read_all(obj, stored, [OTHER_KEK]) == data  # the same object bytes
    with pytest.raises(ArchiveKeyError):
        open_object(obj, stored, [KEK])  # the old KEK opens it no more
    assert rewrap(stored, [KEK], OTHER_KEK) == stored  # again after a stop halfway: unchanged
    with pytest.raises(ArchiveKeyError, match=KEK.key_id):
        rewrap(meta, [], OTHER_KEK)  # the old KEK is needed
    with pytest.raises(ValueError, match="not encrypted"):
        rewrap(archive(data)[1], [KEK], OTHER_KEK)
