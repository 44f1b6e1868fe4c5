"""Key rotation of an encrypted archive: every archived file's data key wrapped again by the
current key-encryption key (``binlog-relay archive --config FILE --rewrap``).

Only the meta documents change (objectformat.rewrap): the frames stay as they are, encrypted
under their data keys, so a rotation costs one small GET and PUT per file whatever the archive's
size, and no nonce is ever used twice.  A meta is replaced by one PUT, atomically: a reader sees
the old wrapping or the new, both of which open while the old key is still configured.  Each file
is handled on its own: one that cannot be re-wrapped (under a key that is not configured, its meta
document damaged) is reported with the reason and the run goes on, and a file deleted from the
archive meanwhile (archive.retention, which deletes the meta document first) is told apart by
asking for its meta again, as ``--verify`` does (and a re-wrapped meta whose object went meanwhile
is deleted again: no meta is left naming an object that is gone).  A store that cannot be reached ends the run.  A
run that stops halfway is run again (files already under the current key are only checked).  Once
a run has re-wrapped every file, the old key can leave ``old_encryption_key_files``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import InputError, Refusal
from .objectformat import Kek, rewrap
from .objects import UploadMismatch, listed_metas, meta_key, object_key, read_meta
from .store import ObjectStore, StoreConfig, open_store


@dataclass(frozen=True)
class NotRewrapped:
    name: str
    reason: str


@dataclass(frozen=True)
class RewrapResult:
    rewrapped: tuple[str, ...]
    already: int  # files already under the current key
    plain: int  # files archived without encryption: left as they are
    failed: tuple[NotRewrapped, ...] = ()  # still under their old wrapping (or unreadable): the reason each
    deleted: tuple[str, ...] = ()  # by archive.retention while the run went on


class _Deleted(Exception):
    """The file's object went while its meta was re-wrapped: the meta just stored is taken back."""


def rewrap_archive(store_config: StoreConfig, keks: Sequence[Kek], progress: Callable[[str], None],
                   open_store_for: Callable[[StoreConfig], ObjectStore] = open_store) -> RewrapResult:
    """Wrap every encrypted archived file's data key by ``keks[0]`` (the current key), opening the
    old wrappings with any of ``keks``.  Blocking; safe beside a running relay (it reads each meta
    afresh when it fetches a file).  StoreUnavailable or StoreAccessError if the store fails."""
    if not keks:
        raise InputError("archive.encryption_key_file is not set: there is no key to wrap the archive's keys with")
    current = keks[0]
    store = open_store_for(store_config)
    store.check()
    # every meta document, those that do not parse included (list_archive leaves them out): a file
    # whose meta cannot be read is not re-wrapped, and the rotation must say so
    names = sorted(name for name, _ in listed_metas(store))
    rewrapped: list[str] = []
    failed: list[NotRewrapped] = []
    deleted: list[str] = []
    already = plain = 0
    for number, name in enumerate(names, 1):
        try:
            old_kek_id = _rewrap_file(store, name, keks, current)
        except _Deleted:  # between our GET and PUT: the meta just stored is taken back, no meta without its object
            store.delete(meta_key(name))
            deleted.append(name)
            progress(f"deleted {number}/{len(names)}: {name} (from the archive, while it was re-wrapped)")
        except Refusal as exc:  # ArchiveKeyError, ArchiveDamaged, ArchiveUnsupported, ObjectMissing
            if store.head(meta_key(name)) is None:
                deleted.append(name)
                progress(f"deleted {number}/{len(names)}: {name} (from the archive, while it was re-wrapped)")
            else:
                failed.append(NotRewrapped(name, str(exc)))
                progress(f"NOT re-wrapped {number}/{len(names)}: {name}: {exc}")
        else:
            if old_kek_id is None:
                plain += 1
            elif old_kek_id == current.key_id:
                already += 1
            else:
                rewrapped.append(name)
                progress(f"re-wrapped {number}/{len(names)}: {name} (key {old_kek_id} -> {current.key_id})")
    return RewrapResult(tuple(rewrapped), already, plain, tuple(failed), tuple(deleted))


def _rewrap_file(store: ObjectStore, name: str, keks: Sequence[Kek], current: Kek) -> str | None:
    """Re-wrap one file's data key by ``current``, its meta read back; the key id of the KEK that
    wrapped it before (``current``'s: it was already; None: not encrypted, left as it is).
    A Refusal if it cannot be (its meta gone, damaged, or under a key not in ``keks``); _Deleted if
    its object went while its meta was re-wrapped."""
    meta = read_meta(store, name)
    if meta.encryption is None:
        return None
    again = rewrap(meta, keks, current)
    if again is not meta:
        store.put(meta_key(name), [again.to_json()])
        if read_meta(store, name) != again:  # read back, as an upload is
            raise UploadMismatch(meta_key(name), "read back, it is not the re-wrapped meta document just stored")
        if store.head(object_key(name)) is None:  # archive.retention deleted the file meanwhile
            raise _Deleted(name)
    return meta.encryption.kek_id
