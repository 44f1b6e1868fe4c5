"""A check of the whole archive (``binlog-relay archive --config FILE --verify``): every archived
file read back as a replica would get it, so that damage is found by the operator's schedule, not
by the restore that needs the file.

Each file listed by a meta document is fetched whole (the shelf's fetch: its trailer checked
against the meta, its data key unwrapped, each frame's size, GCM tag, zstd checksum and content
size checked) into a scratch copy, and the copy's events are checked as an import checks them
(CRC32, positions, one origin server).  What fails is reported with the reason and the run goes
on to the next file; a file deleted from the archive while it was checked (archive.retention,
which deletes the meta document first) is told apart from damage by asking for its meta again.
A store that cannot be reached ends the run (there is nothing to tell about the files then).
Read-only: it runs beside the relay that writes the archive, and takes no claim on it.  One
scratch copy at a time, in the system's temporary directory (``TMPDIR``): the disk it needs is
the largest binlog file's size.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import Refusal
from ..storage.importer import BinlogImportError, check_file
from .objectformat import Kek
from .objects import ArchivedFileReader, listed_metas, meta_key
from .store import ObjectStore, StoreConfig, open_store


@dataclass(frozen=True)
class Damage:
    name: str
    reason: str


@dataclass(frozen=True)
class VerifyResult:
    verified: tuple[str, ...]
    file_bytes: int  # of the files verified
    damaged: tuple[Damage, ...]
    deleted: tuple[str, ...]  # by archive.retention while the check ran


def verify_archive(store_config: StoreConfig, keks: Iterable[Kek], progress: Callable[[str], None],
                   open_store_for: Callable[[StoreConfig], ObjectStore] = open_store) -> VerifyResult:
    """Read back and check every archived file, oldest name first, a progress line after each.
    Blocking; StoreUnavailable or StoreAccessError if the store fails."""
    keks = tuple(keks)
    store = open_store_for(store_config)
    store.check()
    # every meta document, those that do not parse included: list_archive leaves them out (for a
    # relay they are not archived), for a check they are what it is looking for
    names = sorted(name for name, _ in listed_metas(store))
    verified: list[str] = []
    damaged: list[Damage] = []
    deleted: list[str] = []
    file_bytes = 0
    with tempfile.TemporaryDirectory(prefix="binlog-relay-verify-") as scratch:
        for number, name in enumerate(names, 1):
            copy = Path(scratch) / name
            try:
                file_bytes += _verify_file(store, name, keks, copy)
            except (Refusal, BinlogImportError) as exc:
                if store.head(meta_key(name)) is None:
                    deleted.append(name)
                    progress(f"deleted {number}/{len(names)}: {name} (from the archive, while it was checked)")
                    continue
                damaged.append(Damage(name, str(exc)))
                progress(f"DAMAGED {number}/{len(names)}: {name}: {exc}")
            else:
                verified.append(name)
                progress(f"verified {number}/{len(names)}: {name}")
            finally:
                copy.unlink(missing_ok=True)
    return VerifyResult(tuple(verified), file_bytes, tuple(damaged), tuple(deleted))


def _verify_file(store: ObjectStore, name: str, keks: tuple[Kek, ...], copy: Path) -> int:
    """The file's size, once fetched into ``copy`` with every check passed."""
    reader = ArchivedFileReader(store, name, keks)
    reader.copy_to(copy)
    check_file(copy, name)
    return reader.size
