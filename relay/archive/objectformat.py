"""The archived object format, sans-IO (decision 6): a stored binlog file as one object of
independently compressed, optionally encrypted frames with a seek table at its end, and the small
meta document stored beside it.

A binlog file is cut into chunks of ``chunk_size`` bytes (4 MiB by default; every chunk but the last
is full) and each chunk is compressed on its own into one zstd frame, so that a read starting at any
offset fetches and decodes only the frames that cover it.  The object follows the zstd *seekable
format* (contrib/seekable_format/zstd_seekable_compression_format.md in the zstd repository): the
frames, then a skippable frame holding the seek table, which ends the object.  Skippable frames are
ignored by every zstd decoder, so an unencrypted object is an ordinary .zst file: ``zstd -d`` gives
back the binlog file byte for byte.

Byte layout of an object (every integer little-endian, as in zstd)::

    frame 0 | frame 1 | ... | frame n-1 | info frame | seek table frame

    frame i          unencrypted: one zstd frame of chunk i, with its content size in the frame
                     header and the XXH64 content checksum (low 32 bits) at its end.
                     encrypted:   AES-256-GCM(data key, nonce(i), that zstd frame, aad(i)):
                                  the ciphertext and its 16-byte tag; the nonce is not stored.
    info frame       a zstd skippable frame (listed in the seek table, as the format asks of
                     skippable frames, with a decompressed size of 0):
        0   4   0x184D2A5A            skippable magic number
        4   4   content size          61 + L
        8   4   b"BRLA"               "binlog-relay archive"
        12  1   format version        1
        13  1   cipher                0 = none, 1 = AES-256-GCM
        14  2   reserved              0
        16  16  object id             random, one per object: ties frames, trailer and meta together
        32  4   chunk size
        36  8   file size             bytes of the binlog file
        44  4   n                     number of data frames (0 for an empty file)
        48  1   L                     length of the name
        49  L   name                  the binlog file's name, UTF-8
        49+L 16 trailer tag           encrypted: AES-256-GCM tag of an empty message under the
                                      trailer nonce, authenticating bytes 8..49+L of this frame and
                                      the n data frames' seek table entries; unencrypted: zeros
        65+L 4  CRC32                 of bytes 8..65+L of this frame, then the n data frames'
                                      seek table entries, then the seek table footer's first 5 bytes
                                      (number of frames, descriptor).  It catches damage without any
                                      key, and stays the last 4 bytes of the info frame in every
                                      version, so that it is checked before the version is believed
    seek table frame (exactly as the seekable format defines it)
        0   4   0x184D2A5E            skippable magic number
        4   4   frame size            (n + 1) * E + 9
        8   ... n + 1 entries of E bytes: compressed size u32, decompressed size u32 and, when the
                descriptor's checksum flag is set, the low 32 bits of the XXH64 of the decompressed
                chunk (E = 12; unencrypted objects) or no checksum (E = 8; encrypted objects).  The
                last entry is the info frame's (its size, 0, XXH64 of nothing: 0x51D8E999).
        end-9 4 number of frames      n + 1
        end-5 1 descriptor            0x80 (checksums) unencrypted, 0x00 encrypted
        end-4 4 0x8F92EAB1            seekable magic number

    nonce(i)  = 00 00 00 00 | i as 8 bytes big-endian          (data frames)
    trailer   = 00 00 00 01 | 8 zero bytes                      (the trailer tag; never a frame's)
    aad(i)    = b"BRLA" | version (1 byte) | object id (16) | i (u32 LE) | chunk i's size (u32 LE)

Why these choices:

- Checksum of a chunk: the low 32 bits of XXH64, because that is what the seekable format defines
  for the seek table (a seekable-aware zstd tool checks it too), and because zstd computes exactly
  that value as the frame's content checksum: the writer copies it from the frame's last 4 bytes at
  no cost, and the reader's decompression verifies the chunk against it (the reader also checks that
  the frame's checksum is the seek table's, so the table's value is what is verified).  CRC32 would
  need a second pass over every chunk and would not be the format's checksum.  Encrypted objects
  leave it out of the (plaintext) seek table: the GCM tag is a far stronger check, and a hash of
  the plaintext chunk should not sit in clear beside the ciphertext.
- Encryption: a random 256-bit data key per object; the nonce is the frame number, unique for the
  key since a key encrypts one object once (a writer never restarts; a retried upload is a new
  writer with a new key).  The associated data binds each frame to its object and its place, so
  frames cannot be reordered, dropped or swapped between objects undetected; the trailer tag binds
  the sizes, the frame count, the name and the object id, so the seek table cannot be cut or
  edited either.
- The data key, wrapped by the key-encryption key (KEK; AES key wrap, RFC 3394), lives in the
  **meta document** (``ObjectMeta``, canonical JSON), a separate small object beside the data
  object, not in the object.  A KEK rotation then rewrites only the meta (``rewrap``: one small,
  atomic PUT per object) and never the gigabytes of frames, and once every meta is re-wrapped the
  old KEK opens nothing (a copy of the wrapped key inside the object would have kept the old KEK
  useful forever).  The meta is also the archive's commit record: the uploader writes it after the
  object is complete, so an object without its meta is an unfinished upload.  An encrypted object
  whose meta is lost cannot be read: keep both.  The meta names the KEK by ``key_id``, a short
  SHA-256 fingerprint, so a rotation can tell which KEK wrapped which object.  It also carries,
  when the uploader knew them, the lowest and highest header times of the file's commits
  (``commit_times``: ``[lo, hi, check]``, the check the CRC32 of ``"<object id hex>:<lo>:<hi>"``;
  absent otherwise): a relay that lists the archive (on an empty disk, or without its
  archive.json) knows which file a search by time must read without reading any.

Reading: GET the last ``min(TRAILER_PROBE, size)`` bytes, ask ``trailer_length`` how many are
needed (one more ranged GET in the rare case the seek table is longer), ``ObjectLayout.parse`` them,
build an ``ObjectReader`` with the meta and the KEKs, then ``frames_for(offset, length)`` gives the
byte ranges to GET and ``decode_frame`` turns each into its verified chunk.  Damaged, cut short or
tampered data raises ``ArchiveDamaged`` naming the object and the frame, a missing or wrong KEK
``ArchiveKeyError``: wrong bytes are never returned.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from ..errors import InputError, Refusal

FORMAT_VERSION = 1
DEFAULT_CHUNK_SIZE = 4 << 20
DEFAULT_LEVEL = 1  # 2.6x the speed of level 3 on the benchmark's binlogs, objects 18% larger (BENCHMARKS.md)
# The seekable format's own limits (ZSTD_SEEKABLE_MAX_FRAME_DECOMPRESSED_SIZE and _MAXFRAMES):
# they also bound what a damaged seek table can make the reader allocate.
MAX_CHUNK_SIZE = 1 << 30
MAX_FRAMES = 0x8000000
# What a reader GETs from the end of an object first: the trailer of a file of up to about 20 GiB
# in 4 MiB chunks (5,000 frames).  A longer one takes a second ranged GET (trailer_length).
TRAILER_PROBE = 64 << 10
KEK_SIZE = 32

INFO_FRAME_MAGIC = 0x184D2A5A
SEEK_TABLE_MAGIC = 0x184D2A5E
SEEKABLE_MAGIC = 0x8F92EAB1
CHECKSUM_FLAG = 0x80
RESERVED_BITS = 0x7C
EMPTY_XXH64_LOW32 = 0x51D8E999  # the checksum of no data: the entry of the info frame
INFO_MAGIC = b"BRLA"
CIPHER_NONE = 0
CIPHER_AES_256_GCM = 1
TAG_SIZE = 16
ZSTD_FRAME_MIN = 13  # an empty zstd frame with content size and checksum: the smallest the writer makes

_SKIPPABLE_HEADER = struct.Struct("<II")  # magic, content size
_INFO_FIXED = struct.Struct("<4sBBH16sIQIB")  # magic .. name length: 41 bytes
_FOOTER = struct.Struct("<IBI")  # number of frames, descriptor, seekable magic: 9 bytes
_ENTRY_WITH_CHECKSUM = struct.Struct("<III")
_ENTRY = struct.Struct("<II")
_CRC = struct.Struct("<I")
# Compressed bytes fed to the decoder at a time by decode_frame_to: its pieces of a binlog stay a
# few hundred KiB that the allocator reuses, where each whole chunk took fresh pages, a fault each.
_DECODE_STEP = 64 << 10
_INFO_MIN = _SKIPPABLE_HEADER.size + _INFO_FIXED.size + TAG_SIZE + _CRC.size  # 69: an empty name
_INFO_MAX = _INFO_MIN + 255
_TRAILER_NONCE = b"\x00\x00\x00\x01" + bytes(8)

META_FORMAT = "binlog-relay-archive"
ALGORITHM = "AES-256-GCM"
KEY_WRAP = "AES-KW-256 (RFC 3394)"
_KEK_ID_DOMAIN = b"binlog-relay kek id\x00"


# ------------------------------------------------------------------------------------ errors


class ArchiveError(Refusal):
    """An archived object cannot be read.  A ``Refusal``: the one read that needed it is refused
    (a dump gets the ERR a primary sends for a damaged binlog, as for a damaged stored event, see
    storage/reader.py StoredFileDamaged) and the relay carries on serving everything else; retrying
    would read the same stored bytes, so it is not a ``RetryableError``, and one bad object must not
    stop the relay, so it is not a ``FatalError``."""

    def __init__(self, object_name: str, what: str, frame: FrameEntry | int | None = None) -> None:
        where = f"archived object '{object_name}'"
        if isinstance(frame, FrameEntry):
            where += (f", frame {frame.index} (bytes {frame.file_start} to {frame.file_end} of the "
                      f"binlog file)")
        elif frame is not None:
            where += f", frame {frame}"
        super().__init__(f"{where}: {what}")
        self.object_name = object_name
        self.frame = frame.index if isinstance(frame, FrameEntry) else frame


class ArchiveDamaged(ArchiveError):
    """The stored bytes do not verify: damaged, cut short, edited, or not of this object."""


class ArchiveKeyError(ArchiveError):
    """None of the configured key-encryption keys opens the object's data key."""


class ArchiveUnsupported(ArchiveError):
    """Written by another version of the format than this relay reads."""


# ------------------------------------------------------------------------------------ keys


@dataclass(frozen=True, repr=False)
class Kek:
    """A key-encryption key.  Its repr shows the key id only, so it can be logged by accident
    without leaking; the key bytes are never part of any message."""

    key: bytes = field(repr=False)
    key_id: str

    def __repr__(self) -> str:
        return f"Kek(key_id={self.key_id!r})"


def kek_id(key: bytes) -> str:
    """The short fingerprint that names a KEK in meta documents: the first 16 hex digits of the
    SHA-256 of a fixed label and the key (the label keeps it distinct from any plain hash of the
    key made elsewhere).  Shell: ``(printf 'binlog-relay kek id\\0'; cat kek) | sha256sum``."""
    return "sha256:" + hashlib.sha256(_KEK_ID_DOMAIN + key).hexdigest()[:16]


def load_kek(data: bytes, source: str) -> Kek:
    """The KEK from the content of a key file: 32 raw bytes (``head -c 32 /dev/urandom``) or 64 hex
    digits (``openssl rand -hex 32``), surrounding whitespace allowed for the hex form.  ``source``
    (e.g. the file's path) names it in the error, which never shows any of its content."""
    if len(data) == KEK_SIZE:
        return Kek(bytes(data), kek_id(bytes(data)))
    text = data.strip()
    if len(text) == 2 * KEK_SIZE:
        try:
            key = binascii.unhexlify(text)
        except (binascii.Error, ValueError):
            pass
        else:
            return Kek(key, kek_id(key))
    raise InputError(f"key-encryption key {source}: expected 32 raw bytes or 64 hex digits, got "
                     f"{len(data)} bytes that are neither (make one with: head -c 32 /dev/urandom > FILE)")


def _wrap(kek: Kek, data_key: bytes) -> bytes:
    return aes_key_wrap(kek.key, data_key)


# ------------------------------------------------------------------------------------ meta


@dataclass(frozen=True)
class Envelope:
    """How the object's data key is kept: wrapped by the KEK ``kek_id``."""

    kek_id: str
    wrapped_key: bytes = field(repr=False)
    algorithm: str = ALGORITHM
    key_wrap: str = KEY_WRAP


@dataclass(frozen=True)
class ObjectMeta:
    """The meta document stored beside an object: what it holds (name, sizes, object id, to list
    the archive without reading objects) and, when encrypted, the wrapped data key.  Canonical JSON
    (sorted keys, no spaces, one trailing newline): any byte changed in it fails ``from_json``."""

    name: str
    object_id: bytes
    file_size: int
    object_size: int
    frames: int
    chunk_size: int
    encryption: Envelope | None = None
    commit_times: tuple[int, int] | None = None  # the file's commits' lowest and highest header times

    def to_json(self) -> bytes:
        document: dict[str, object] = {
            "archive_format": FORMAT_VERSION,
            "chunk_size": self.chunk_size,
            "compression": "zstd",
            "encryption": None if self.encryption is None else {
                "algorithm": self.encryption.algorithm,
                "kek_id": self.encryption.kek_id,
                "key_wrap": self.encryption.key_wrap,
                "wrapped_key": base64.b64encode(self.encryption.wrapped_key).decode("ascii"),
            },
            "file_size": self.file_size,
            "format": META_FORMAT,
            "frames": self.frames,
            "name": self.name,
            "object_id": self.object_id.hex(),
            "object_size": self.object_size,
        }
        if self.commit_times is not None:  # absent rather than null: a meta written without it keeps its bytes
            document["commit_times"] = [*self.commit_times, _times_check(self.object_id, *self.commit_times)]
        return (json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes, object_name: str) -> ObjectMeta:
        """Parse a meta document; ``object_name`` (its key in the store) names it in errors."""

        def damaged(what: str) -> ArchiveDamaged:
            return ArchiveDamaged(object_name, f"the meta document is damaged: {what}")

        try:
            document = json.loads(data)
        except (UnicodeDecodeError, ValueError):
            raise damaged("not JSON") from None
        if not isinstance(document, dict) or document.get("format") != META_FORMAT:
            raise damaged(f"not a {META_FORMAT} meta document")
        version = document.get("archive_format")
        if not _is_int(version):
            raise damaged("no archive_format version")
        if version != FORMAT_VERSION:
            raise ArchiveUnsupported(object_name, f"meta document of archive format {version}; this relay reads "
                                                  f"format {FORMAT_VERSION} (archived by another relay version?)")
        try:
            meta = cls._from_document(document)
        except (KeyError, TypeError, ValueError, binascii.Error) as exc:
            raise damaged(f"a field is missing or wrong ({type(exc).__name__})") from None
        if meta.to_json() != bytes(data):
            raise damaged("its bytes are not the document they describe (changed after writing)")
        return meta

    @classmethod
    def _from_document(cls, document: dict[str, object]) -> ObjectMeta:
        name, object_id, envelope = document["name"], document["object_id"], document["encryption"]
        if not isinstance(name, str) or not isinstance(object_id, str) or document["compression"] != "zstd":
            raise TypeError("name")
        encryption = None
        if envelope is not None:
            if not isinstance(envelope, dict) or set(envelope) != {"algorithm", "kek_id", "key_wrap", "wrapped_key"}:
                raise TypeError("encryption")
            if envelope["algorithm"] != ALGORITHM or envelope["key_wrap"] != KEY_WRAP:
                raise ValueError("algorithm")
            if not isinstance(envelope["kek_id"], str) or not isinstance(envelope["wrapped_key"], str):
                raise TypeError("encryption")
            encryption = Envelope(envelope["kek_id"], base64.b64decode(envelope["wrapped_key"], validate=True))
        commit_times = None
        if "commit_times" in document:
            times = document["commit_times"]
            if not isinstance(times, list) or len(times) != 3 or not all(_is_int(t) and t >= 0 for t in times):
                raise TypeError("commit_times")
            lo, hi, check = times
            # nothing else in the meta or the object vouches for them, and a wrong time would make a
            # search pass the file holding the answer
            if lo > hi or check != _times_check(bytes.fromhex(object_id), lo, hi):
                raise ValueError("commit_times")
            commit_times = (lo, hi)
        return cls(name, bytes.fromhex(object_id), _size(document, "file_size"), _size(document, "object_size"),
                   _size(document, "frames"), _size(document, "chunk_size"), encryption, commit_times)


def _times_check(object_id: bytes, lo: int, hi: int) -> int:
    """CRC32 of the commit times, tied to the object."""
    return zlib.crc32(f"{object_id.hex()}:{lo}:{hi}".encode())


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size(document: dict[str, object], key: str) -> int:
    value = document[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(key)
    return value


def rewrap(meta: ObjectMeta, old_keks: Iterable[Kek], new_kek: Kek) -> ObjectMeta:
    """Key rotation: the same meta with the data key wrapped by ``new_kek`` instead of the old KEK
    (found among ``old_keks`` by its key id).  The object's frames do not change, so only the meta
    is written again; the data key stays, so no nonce is ever used twice.  Idempotent: a meta
    already wrapped by ``new_kek`` comes back unchanged (a rotation that stopped halfway is run
    again)."""
    if meta.encryption is None:
        raise ValueError(f"archived object '{meta.name}' is not encrypted: there is no key to re-wrap")
    if meta.encryption.kek_id == new_kek.key_id:
        _unwrap(meta, [new_kek], meta.name)  # a damaged wrapped key is found now, not at the next read
        return meta
    data_key = _unwrap(meta, old_keks, meta.name)
    return replace(meta, encryption=Envelope(new_kek.key_id, _wrap(new_kek, data_key)))


def _unwrap(meta: ObjectMeta, keks: Iterable[Kek], object_name: str) -> bytes:
    """The data key of an encrypted object.  "Wrong key" (no configured KEK opens it) and "damaged"
    (the KEK the meta names is configured but does not open it) are told apart by the key id."""
    envelope = meta.encryption
    assert envelope is not None
    keks = list(keks)
    named = [kek for kek in keks if kek.key_id == envelope.kek_id]
    if named:
        try:
            return aes_key_unwrap(named[0].key, envelope.wrapped_key)
        except (InvalidUnwrap, ValueError):
            raise ArchiveDamaged(object_name, f"the wrapped data key does not unwrap with KEK {envelope.kek_id}, "
                                              "the KEK its meta document names: the meta document is damaged") from None
    for kek in keks:  # the meta's key id may be the damaged part: any KEK that unwraps tells
        try:
            aes_key_unwrap(kek.key, envelope.wrapped_key)
        except (InvalidUnwrap, ValueError):
            continue
        raise ArchiveDamaged(object_name, f"the meta document names KEK {envelope.kek_id} but the data key "
                                          f"unwraps with KEK {kek.key_id}: the meta document is damaged")
    have = ", ".join(kek.key_id for kek in keks) or "none"
    raise ArchiveKeyError(object_name, f"encrypted with KEK {envelope.kek_id}, which is not configured "
                                       f"(configured: {have}); give that key file to read it")


# ------------------------------------------------------------------------------------ writer


def _frame_nonce(index: int) -> bytes:
    return b"\x00\x00\x00\x00" + index.to_bytes(8, "big")


def _frame_aad(object_id: bytes, index: int, size: int) -> bytes:
    return INFO_MAGIC + bytes([FORMAT_VERSION]) + object_id + struct.pack("<II", index, size)


class ObjectWriter:
    """Turns a binlog file, fed in pieces of any size, into its archived object, piece by piece.

    ``write`` returns the frames completed by the bytes given (each chunk is compressed, and
    encrypted, as soon as it is full, so an uploader streams a multipart upload while the file is
    read: memory stays at about one chunk); ``finish`` returns the last frame and the trailer, and
    sets ``meta``.  The object is the concatenation of everything returned, in order.  With a
    ``kek`` the object is encrypted under a fresh random data key; a writer is used once.
    """

    def __init__(self, name: str, *, chunk_size: int = DEFAULT_CHUNK_SIZE, level: int = DEFAULT_LEVEL,
                 kek: Kek | None = None) -> None:
        if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
            raise ValueError(f"chunk_size must be 1 to {MAX_CHUNK_SIZE} bytes, not {chunk_size}")
        encoded = name.encode("utf-8")
        if len(encoded) > 255:
            raise ValueError(f"file name longer than 255 bytes: {name[:40]}...")
        self.name = name
        self.chunk_size = chunk_size
        self.object_id = os.urandom(16)
        self.meta: ObjectMeta | None = None
        self._name = encoded
        self.level = level
        self._local = threading.local()
        self._cipher: AESGCM | None = None
        self._envelope: Envelope | None = None
        if kek is not None:
            data_key = AESGCM.generate_key(bit_length=256)
            self._cipher = AESGCM(data_key)
            self._envelope = Envelope(kek.key_id, _wrap(kek, data_key))
        self._pending = bytearray()
        self._entries = bytearray()  # the data frames' seek table entries, as stored
        self._frames = 0
        self._file_size = 0
        self._object_size = 0
        self._finished = False

    @property
    def object_size(self) -> int:
        """Bytes of the object returned so far."""
        return self._object_size

    @property
    def frames_added(self) -> int:
        """Data frames returned so far: the index of the next one."""
        return self._frames

    def write(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Take the next bytes of the file; return the frames they complete (maybe none)."""
        if self._finished:
            raise ValueError("ObjectWriter.write after finish")
        out: list[bytes] = []
        view = memoryview(data).cast("B")
        while view:
            if not self._pending and len(view) >= self.chunk_size:  # a whole chunk: no copy
                out.append(self._frame(view[: self.chunk_size]))
                view = view[self.chunk_size:]
                continue
            take = min(self.chunk_size - len(self._pending), len(view))
            self._pending += view[:take]
            view = view[take:]
            if len(self._pending) == self.chunk_size:
                out.append(self._frame(self._pending))
                self._pending.clear()
        return out

    def finish(self) -> bytes:
        """The last (partial) frame if any, then the info frame and the seek table."""
        if self._finished:
            raise ValueError("ObjectWriter.finish called twice")
        self._finished = True
        last = self._frame(self._pending) if self._pending else b""
        self._pending = bytearray()
        cipher = CIPHER_NONE if self._cipher is None else CIPHER_AES_256_GCM
        head = _INFO_FIXED.pack(INFO_MAGIC, FORMAT_VERSION, cipher, 0, self.object_id, self.chunk_size,
                                self._file_size, self._frames, len(self._name)) + self._name
        entries = bytes(self._entries)
        tag = bytes(TAG_SIZE) if self._cipher is None else self._cipher.encrypt(_TRAILER_NONCE, b"", head + entries)
        footer = _FOOTER.pack(self._frames + 1, 0 if self._cipher else CHECKSUM_FLAG, SEEKABLE_MAGIC)
        crc = _trailer_crc(head + tag, entries, footer)
        content = head + tag + _CRC.pack(crc)
        info = _SKIPPABLE_HEADER.pack(INFO_FRAME_MAGIC, len(content)) + content
        if self._cipher is None:
            table = entries + _ENTRY_WITH_CHECKSUM.pack(len(info), 0, EMPTY_XXH64_LOW32)
        else:
            table = entries + _ENTRY.pack(len(info), 0)
        seek = _SKIPPABLE_HEADER.pack(SEEK_TABLE_MAGIC, len(table) + _FOOTER.size) + table + footer
        trailer = last + info + seek
        self._object_size += len(info) + len(seek)
        self.meta = ObjectMeta(self.name, self.object_id, self._file_size, self._object_size, self._frames,
                               self.chunk_size, self._envelope)
        return trailer

    def encode(self, index: int, chunk: bytes | bytearray | memoryview) -> EncodedFrame:
        """Chunk ``index`` of the file as its frame: compressed, and encrypted.  Thread-safe and
        touches no state of the writer, so an uploader encodes several chunks at once (zstd and AES
        release the GIL) and hands them to ``add`` in order."""
        compressor = getattr(self._local, "compressor", None)
        if compressor is None:  # a compressor per thread: they are not thread-safe
            compressor = self._local.compressor = zstandard.ZstdCompressor(
                level=self.level, write_checksum=True, write_content_size=True)
        compressed = compressor.compress(chunk)
        if self._cipher is None:
            return EncodedFrame(index, len(chunk), compressed)
        return EncodedFrame(index, len(chunk), self._cipher.encrypt(_frame_nonce(index), compressed,
                                                                    _frame_aad(self.object_id, index, len(chunk))))

    def add(self, frame: EncodedFrame) -> bytes:
        """Take the next frame ``encode`` made (in the file's order); return its bytes."""
        if frame.index != self._frames:
            raise ValueError(f"{self.name}: frame {frame.index} given where frame {self._frames} comes next")
        if frame.index + 1 >= MAX_FRAMES:
            raise ValueError(f"{self.name}: more than {MAX_FRAMES - 1} chunks; use a larger chunk_size")
        if self._cipher is None:
            # zstd's content checksum is the seekable format's checksum: the frame's last 4 bytes
            (checksum,) = _CRC.unpack_from(frame.data, len(frame.data) - 4)
            self._entries += _ENTRY_WITH_CHECKSUM.pack(len(frame.data), frame.size, checksum)
        else:
            self._entries += _ENTRY.pack(len(frame.data), frame.size)
        self._frames += 1
        self._file_size += frame.size
        self._object_size += len(frame.data)
        return frame.data

    def _frame(self, chunk: bytes | bytearray | memoryview) -> bytes:
        return self.add(self.encode(self._frames, chunk))


@dataclass(frozen=True)
class EncodedFrame:
    """A chunk of the file as stored: ``size`` file bytes became ``data``."""

    index: int
    size: int
    data: bytes = field(repr=False)


def _trailer_crc(info: bytes | memoryview, entries: bytes, footer: bytes | memoryview) -> int:
    """The info frame's CRC32: its content up to the CRC, the data frames' entries, and the footer's
    number of frames and descriptor (whose unused bits no decoder reads: only this sees them)."""
    return zlib.crc32(footer[:5], zlib.crc32(entries, zlib.crc32(info)))


# ------------------------------------------------------------------------------------ reader


@dataclass(frozen=True)
class FrameEntry:
    """One data frame: where it is in the object (to GET) and which bytes of the file it holds."""

    index: int
    object_start: int
    compressed_size: int
    file_start: int
    decompressed_size: int
    checksum: int | None  # low 32 bits of XXH64 of the chunk; None in encrypted objects

    @property
    def object_end(self) -> int:
        """End (exclusive) of the frame in the object: GET bytes object_start..object_end-1."""
        return self.object_start + self.compressed_size

    @property
    def file_end(self) -> int:
        return self.file_start + self.decompressed_size

    def piece(self, chunk: bytes, offset: int, length: int) -> bytes:
        """The part of this frame's decoded ``chunk`` that lies in file bytes [offset, offset+length)."""
        start = max(offset, self.file_start) - self.file_start
        end = min(offset + length, self.file_end) - self.file_start
        return chunk[start:end] if end > start else b""


@dataclass(frozen=True)
class ObjectInfo:
    """The info frame of an object."""

    version: int
    encrypted: bool
    object_id: bytes
    chunk_size: int
    file_size: int
    frames: int
    name: str
    trailer_tag: bytes = field(repr=False)


def trailer_length(tail: bytes, object_size: int, object_name: str) -> int:
    """How many bytes at the end of the object hold its trailer (info frame and seek table), from
    ``tail``, the last ``min(object_size, TRAILER_PROBE)`` bytes of it (at least the last 21)."""
    if len(tail) > object_size:
        raise ValueError(f"{len(tail)} bytes of tail of an object of {object_size}")
    if object_size < _FOOTER.size + _ENTRY.size:
        raise ArchiveDamaged(object_name, f"only {object_size} bytes: not an archived binlog object, or cut short")
    footer_and_entry = _FOOTER.size + _ENTRY_WITH_CHECKSUM.size
    if len(tail) < min(object_size, footer_and_entry):
        raise ValueError(f"give at least the last {footer_and_entry} bytes of the object")
    count, descriptor, magic = _FOOTER.unpack_from(tail, len(tail) - _FOOTER.size)
    if magic != SEEKABLE_MAGIC:
        raise ArchiveDamaged(object_name, "no seek table at its end: not an archived binlog object, or cut short "
                                          "(an interrupted upload, a damaged copy)")
    if descriptor & RESERVED_BITS:
        raise ArchiveDamaged(object_name, f"the seek table's descriptor has reserved bits set ({descriptor:#04x})")
    entry = _ENTRY_WITH_CHECKSUM if descriptor & CHECKSUM_FLAG else _ENTRY
    if not 1 <= count <= MAX_FRAMES:
        raise ArchiveDamaged(object_name, f"the seek table says {count} frames")
    seek_size = _SKIPPABLE_HEADER.size + count * entry.size + _FOOTER.size
    if len(tail) < _FOOTER.size + entry.size:
        raise ArchiveDamaged(object_name, f"only {object_size} bytes: cut short")
    info_size = entry.unpack_from(tail, len(tail) - _FOOTER.size - entry.size)[0]
    if not _INFO_MIN <= info_size <= _INFO_MAX:
        raise ArchiveDamaged(object_name, f"the seek table's last entry is not an info frame ({info_size} bytes)")
    if seek_size + info_size > object_size:
        raise ArchiveDamaged(object_name, f"the trailer would be {seek_size + info_size} bytes of an object of "
                                          f"{object_size}: cut short, or the seek table is damaged")
    return seek_size + info_size


@dataclass(frozen=True)
class ObjectLayout:
    """An object's parsed trailer: its info and the place of every data frame.  Parsing checks the
    trailer's CRC32, its structure and that its sizes add up to the object's size; it needs no key."""

    object_name: str
    object_size: int
    info: ObjectInfo
    frames: tuple[FrameEntry, ...]
    trailer_size: int
    authenticated: bytes = field(repr=False)  # info frame bytes 8..49+L and the data frames' entries

    @classmethod
    def parse(cls, tail: bytes, object_size: int, object_name: str) -> ObjectLayout:
        """The layout from the last bytes of the object (at least ``trailer_length`` of them)."""
        size = trailer_length(tail, object_size, object_name)
        if len(tail) < size:
            raise ValueError(f"the trailer of {object_name} is {size} bytes; give at least those")
        trailer = memoryview(bytes(tail[len(tail) - size:]))

        def damaged(what: str) -> ArchiveDamaged:
            return ArchiveDamaged(object_name, f"its trailer is damaged: {what}")

        count, descriptor, _ = _FOOTER.unpack_from(trailer, size - _FOOTER.size)
        entry = _ENTRY_WITH_CHECKSUM if descriptor & CHECKSUM_FLAG else _ENTRY
        table_size = count * entry.size
        seek_start = size - (_SKIPPABLE_HEADER.size + table_size + _FOOTER.size)
        magic, frame_size = _SKIPPABLE_HEADER.unpack_from(trailer, seek_start)
        if magic != SEEK_TABLE_MAGIC or frame_size != table_size + _FOOTER.size:
            raise damaged("the seek table frame's header does not match its footer")
        table = trailer[seek_start + _SKIPPABLE_HEADER.size: seek_start + _SKIPPABLE_HEADER.size + table_size]
        entries = bytes(table[: table_size - entry.size])
        info_entry = entry.unpack_from(table, table_size - entry.size)
        info_frame = trailer[:seek_start]
        magic, content_size = _SKIPPABLE_HEADER.unpack_from(info_frame, 0)
        if magic != INFO_FRAME_MAGIC or content_size != len(info_frame) - _SKIPPABLE_HEADER.size:
            raise damaged("no info frame before the seek table")
        content = info_frame[_SKIPPABLE_HEADER.size:]
        (crc,) = _CRC.unpack_from(content, len(content) - _CRC.size)
        if _trailer_crc(content[: len(content) - _CRC.size], entries, trailer[size - _FOOTER.size:]) != crc:
            raise damaged("the CRC32 of the info frame and seek table does not match")
        # Past the CRC: what follows is as written, so a mismatch is another version or a bug.
        magic_bytes, version, cipher, reserved, object_id, chunk_size, file_size, frames, name_length = \
            _INFO_FIXED.unpack_from(content, 0)
        if magic_bytes != INFO_MAGIC:
            raise damaged("the info frame is not binlog-relay's")
        if version != FORMAT_VERSION:
            raise ArchiveUnsupported(object_name, f"archive format {version}; this relay reads format "
                                                  f"{FORMAT_VERSION} (archived by another relay version?)")
        if cipher not in (CIPHER_NONE, CIPHER_AES_256_GCM) or reserved:
            raise ArchiveUnsupported(object_name, f"unknown cipher {cipher}")
        encrypted = cipher == CIPHER_AES_256_GCM
        if encrypted == bool(descriptor & CHECKSUM_FLAG):
            raise damaged("the seek table's checksum flag does not match the cipher")
        if len(content) != _INFO_FIXED.size + name_length + TAG_SIZE + _CRC.size:
            raise damaged("the info frame's size does not match its name")
        name_end = _INFO_FIXED.size + name_length
        try:
            name = bytes(content[_INFO_FIXED.size:name_end]).decode("utf-8")
        except UnicodeDecodeError:
            raise damaged("the file name is not UTF-8") from None
        info = ObjectInfo(version, encrypted, bytes(object_id), chunk_size, file_size, frames, name,
                          bytes(content[name_end:name_end + TAG_SIZE]))
        if count != frames + 1 or info_entry[0] != len(info_frame) or info_entry[1] != 0 \
                or info_entry[2:] not in ((), (EMPTY_XXH64_LOW32,)):
            raise damaged("the seek table does not list the data frames and the info frame")
        if not 1 <= chunk_size <= MAX_CHUNK_SIZE:
            raise damaged(f"chunk size {chunk_size}")
        frame_list: list[FrameEntry] = []
        object_start = file_start = 0
        minimum = ZSTD_FRAME_MIN + (TAG_SIZE if encrypted else 0)
        for index in range(frames):
            fields = entry.unpack_from(entries, index * entry.size)
            compressed, decompressed = fields[0], fields[1]
            full = index < frames - 1
            if compressed < minimum or decompressed > chunk_size or (full and decompressed != chunk_size) \
                    or decompressed == 0:
                raise damaged(f"entry {index} says {compressed} bytes holding {decompressed}")
            frame_list.append(FrameEntry(index, object_start, compressed, file_start, decompressed,
                                         fields[2] if len(fields) == 3 else None))
            object_start += compressed
            file_start += decompressed
        if file_start != file_size:
            raise damaged(f"the frames hold {file_start} bytes, the info frame says {file_size}")
        if object_start + size != object_size:
            raise ArchiveDamaged(object_name, f"the frames and trailer make {object_start + size} bytes but the "
                                              f"object is {object_size}: cut short or grown")
        return cls(object_name, object_size, info, tuple(frame_list), size, bytes(content[:name_end]) + entries)

    def frames_for(self, offset: int, length: int) -> tuple[FrameEntry, ...]:
        """The frames holding file bytes [offset, offset+length), clipped at the end of the file:
        GET each one's ``object_start..object_end-1`` (they are contiguous: one ranged GET from the
        first one's start to the last one's end fetches them all)."""
        if offset < 0 or length < 0:
            raise ValueError(f"offset {offset} and length {length} must not be negative")
        end = min(offset + length, self.info.file_size)
        if offset >= end:
            return ()
        # every frame but the last holds chunk_size bytes: the index is a division
        first = offset // self.info.chunk_size
        last = (end - 1) // self.info.chunk_size
        return self.frames[first:last + 1]

    def frame_at(self, file_offset: int) -> FrameEntry:
        """The frame holding a byte of the file."""
        if not 0 <= file_offset < self.info.file_size:
            raise ValueError(f"offset {file_offset} is outside {self.info.name} ({self.info.file_size} bytes)")
        return self.frames[file_offset // self.info.chunk_size]


class ObjectReader:
    """Decodes an object's frames, verified.  Built from its layout and its meta document (needed
    for an encrypted object: it holds the wrapped key) and the configured KEKs: the meta is checked
    against the trailer, the data key unwrapped and the trailer authenticated here, once."""

    def __init__(self, layout: ObjectLayout, meta: ObjectMeta | None = None, keks: Iterable[Kek] = ()) -> None:
        self.layout = layout
        self._name = layout.object_name
        info = layout.info
        self._cipher: AESGCM | None = None
        if meta is not None:
            described = (meta.object_id, meta.name, meta.file_size, meta.object_size, meta.frames, meta.chunk_size)
            actual = (info.object_id, info.name, info.file_size, layout.object_size, info.frames, info.chunk_size)
            if described != actual:
                raise ArchiveDamaged(self._name, f"its meta document describes another object ({meta.name}, object id "
                                                 f"{meta.object_id.hex()}) than the object holds ({info.name}, object "
                                                 f"id {info.object_id.hex()})")
            if (meta.encryption is not None) != info.encrypted:
                raise ArchiveDamaged(self._name, "its meta document and its trailer disagree on encryption")
        if not info.encrypted:
            return
        if meta is None:
            raise ValueError(f"{self._name} is encrypted: its meta document (the wrapped key) is needed to read it")
        cipher = AESGCM(_unwrap(meta, keks, self._name))
        try:
            cipher.decrypt(_TRAILER_NONCE, info.trailer_tag, layout.authenticated)
        except InvalidTag:
            raise ArchiveDamaged(self._name, "its trailer fails authentication: the seek table or info frame was "
                                             "changed, or the meta document belongs to another object") from None
        self._cipher = cipher

    def decode_frame(self, index: int, data: bytes | bytearray | memoryview) -> bytes:
        """The chunk of frame ``index`` from the frame's stored bytes, verified: its size, the GCM
        tag (encrypted), the zstd frame's content size and checksum against the seek table."""
        frame = self.layout.frames[index]
        compressed = self._zstd_frame(frame, data)
        try:
            # a decompressor per call: they are not thread-safe, and the shell decodes in worker threads
            chunk = zstandard.ZstdDecompressor().decompress(compressed, max_output_size=frame.decompressed_size,
                                                  allow_extra_data=False)
        except zstandard.ZstdError as exc:
            raise ArchiveDamaged(self._name, f"does not decompress ({exc})", frame) from None
        if len(chunk) != frame.decompressed_size:
            raise ArchiveDamaged(self._name, f"decompresses to {len(chunk)} bytes, not {frame.decompressed_size}",
                                 frame)
        return chunk

    def decode_frame_to(self, index: int, data: bytes | bytearray | memoryview,
                        write: Callable[[bytes, int], object]) -> None:
        """As decode_frame, the chunk handed to ``write(piece, offset in the chunk)`` piece by piece
        as it is decompressed: what each _DECODE_STEP bytes of the frame give, seldom the whole
        chunk.  The checks end with the frame: what was written is the chunk only once this
        returns (ArchiveDamaged may come after some pieces)."""
        frame = self.layout.frames[index]
        compressed = memoryview(self._zstd_frame(frame, data))
        decoder = zstandard.ZstdDecompressor().decompressobj()
        done = 0
        try:
            for start in range(0, len(compressed), _DECODE_STEP):
                piece = decoder.decompress(compressed[start:start + _DECODE_STEP])
                if done + len(piece) > frame.decompressed_size:
                    raise ArchiveDamaged(self._name, f"decompresses to more than {frame.decompressed_size} bytes",
                                         frame)
                if piece:
                    write(piece, done)
                    done += len(piece)
        except zstandard.ZstdError as exc:
            raise ArchiveDamaged(self._name, f"does not decompress ({exc})", frame) from None
        if done != frame.decompressed_size:
            raise ArchiveDamaged(self._name, f"decompresses to {done} bytes, not {frame.decompressed_size}", frame)
        if not decoder.eof or decoder.unused_data:  # its checksum not reached, or bytes after it
            raise ArchiveDamaged(self._name, "its zstd frame does not end where its bytes do", frame)

    def _zstd_frame(self, frame: FrameEntry, data: bytes | bytearray | memoryview) -> bytes | bytearray | memoryview:
        """The frame's zstd frame (decrypted), its size, tag, header and checksum checked."""
        index = frame.index
        if len(data) != frame.compressed_size:
            raise ArchiveDamaged(self._name, f"got {len(data)} bytes, the seek table says {frame.compressed_size} "
                                             "(a short read, or the object is cut short)", frame)
        compressed: bytes | bytearray | memoryview = data
        if self._cipher is not None:
            try:
                aad = _frame_aad(self.layout.info.object_id, index, frame.decompressed_size)
                compressed = self._cipher.decrypt(_frame_nonce(index), data, aad)
            except InvalidTag:
                raise ArchiveDamaged(self._name, "fails authentication (GCM tag): damaged, or a frame of another "
                                                 "place or another object", frame) from None
        try:
            params = zstandard.get_frame_parameters(compressed)
        except zstandard.ZstdError:
            raise ArchiveDamaged(self._name, "not a zstd frame", frame) from None
        # Checked before decompressing: a damaged header must not make us allocate its claimed size.
        if params.content_size != frame.decompressed_size or not params.has_checksum:
            raise ArchiveDamaged(self._name, f"its zstd header says {params.content_size} bytes, the seek table "
                                             f"{frame.decompressed_size}", frame)
        if frame.checksum is not None and _CRC.unpack_from(compressed, len(compressed) - 4)[0] != frame.checksum:
            raise ArchiveDamaged(self._name, "its checksum differs from the seek table's", frame)
        return compressed
