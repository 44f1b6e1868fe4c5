"""Key rotation of an encrypted archive: every archived file's data key wrapped again by the
current key-encryption key (``binlog-relay archive --config FILE --rewrap``).

Only the meta documents change (objectformat.rewrap): the frames stay as they are, encrypted
under their data keys, so a rotation costs one small GET and PUT per file whatever the archive's
size, and no nonce is ever used twice.  A meta is replaced by one PUT, atomically: a reader sees
the old wrapping or the new, both of which open while the old key is still configured.  A run
that stops halfway is run again (files already under the current key are only checked).  Once
it has gone through, the old key can leave ``old_encryption_key_files``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import InputError
from .objectformat import Kek, rewrap
from .objects import UploadMismatch, list_archive, meta_key, read_meta
from .store import ObjectStore, StoreConfig, open_store


@dataclass(frozen=True)
class RewrapResult:
    rewrapped: tuple[str, ...]
    already: int  # files already under the current key
    plain: int  # files archived without encryption: left as they are


def rewrap_archive(store_config: StoreConfig, keks: Sequence[Kek], progress: Callable[[str], None],
                   open_store_for: Callable[[StoreConfig], ObjectStore] = open_store) -> RewrapResult:
    """Wrap every encrypted archived file's data key by ``keks[0]`` (the current key), opening the
    old wrappings with any of ``keks``.  Blocking; safe beside a running relay (it reads each meta
    afresh when it fetches a file)."""
    if not keks:
        raise InputError("archive.encryption_key_file is not set: there is no key to wrap the archive's keys with")
    current = keks[0]
    store = open_store_for(store_config)
    store.check()
    names = sorted(list_archive(store))
    rewrapped, already, plain = [], 0, 0
    for number, name in enumerate(names, 1):
        meta = read_meta(store, name)
        if meta.encryption is None:
            plain += 1
            continue
        again = rewrap(meta, keks, current)
        if again is meta:
            already += 1
            continue
        store.put(meta_key(name), [again.to_json()])
        if read_meta(store, name) != again:  # read back, as an upload is
            raise UploadMismatch(meta_key(name), "read back, it is not the re-wrapped meta document just stored")
        rewrapped.append(name)
        progress(f"re-wrapped {number}/{len(names)}: {name} (key {meta.encryption.kek_id} -> {current.key_id})")
    return RewrapResult(tuple(rewrapped), already, plain)
