"""Which relay writes an archive, told by an object beside its files, and how the others read it.

Two relays writing one archive at once would upload the same file at the same moment, and the
object of one with the meta document of the other reads as damaged.  So one relay writes at a time:
the first to look records itself in ``owner.json`` (a relay id kept in its data_dir, the primaries
it follows, its host and data_dir for the operator) and writes the record again at every check (a
renewal), and every other relay of one of the same primaries reads the archive: it serves the
archived files and purges a local file once the archive holds it and the archive's copy equals its
own (archiver.py).  Several pods of a StatefulSet thus share one archive.

A reader takes the archive over once the record has not changed for ``writer_lease`` seconds of its
own clock, counted only while the store answers it (a store down for everyone is no sign that the
writer is gone), and then uploads nothing for two checks, which a writer that is alive after all
uses to learn it has been replaced (it becomes a reader).  A relay stood up on an empty disk from
the archive (archiver.seed_from_archive) starts as a reader like any other when the writer lives.

A relay of other primaries never reads nor writes the archive: it would take the other history's
files for its own, purge its copies and serve the other bytes under its names.  Archives written
before this record existed are claimed by the first relay to look.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from ..errors import FatalError
from ..storage.files import atomic_write
from .store import ObjectMissing, ObjectStore

log = logging.getLogger(__name__)

OWNER_KEY = "owner.json"
RELAY_ID_FILE = "relay-id"
OWNER_FORMAT = "binlog-relay archive owner"
DEFAULT_WRITER_LEASE = 60.0
CHECKS_PER_LEASE = 4  # the writer renews its record this many times a lease; readers look as often


class ArchiveInUse(FatalError):
    """The archive is another primary's history: an operator must give this relay its own prefix."""


class WrittenByPeer(ArchiveInUse):
    """Another relay of the same primary writes the archive: this one reads it."""

    def __init__(self, owner: Owner, message: str) -> None:
        super().__init__(message)
        self.owner = owner


@dataclass(frozen=True)
class Owner:
    relay_id: str
    upstream: tuple[str, ...]  # host:port of the primaries it follows, as configured
    host: str
    data_dir: str
    since: float  # Unix time of the claim
    renewed: float = 0.0  # Unix time of the last renewal: the readers see the record change

    def to_json(self) -> bytes:
        document = {"format": OWNER_FORMAT, "relay_id": self.relay_id, "upstream": list(self.upstream),
                    "host": self.host, "data_dir": self.data_dir, "since": self.since, "renewed": self.renewed}
        return (json.dumps(document, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> Owner | None:
        """The record, or None for bytes that are not one (claimed over, as a missing record)."""
        try:
            document = json.loads(data)
            if document.get("format") != OWNER_FORMAT:
                return None
            since = float(document["since"])
            return cls(str(document["relay_id"]), tuple(str(each) for each in document["upstream"]),
                       str(document["host"]), str(document["data_dir"]), since,
                       float(document.get("renewed", since)))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        return (f"relay {self.relay_id} (following {', '.join(self.upstream) or 'no primary'}; host {self.host}, "
                f"data_dir {self.data_dir}, since {when})")


def relay_id(data_dir: Path) -> str:
    """This data_dir's relay id, made the first time it is asked for (durably: a relay that lost it
    would be a reader of its own archive until the lease lapsed)."""
    path = data_dir / RELAY_ID_FILE
    try:
        text = path.read_text().strip()
        if text:
            return text
    except FileNotFoundError:
        pass
    made = uuid.uuid4().hex
    atomic_write(path, (made + "\n").encode())
    return made


def check_same_history(current: Owner | None, url: str, upstream: tuple[str, ...]) -> None:
    """ArchiveInUse if the archive's writer follows none of ``upstream``: another primary's history."""
    if current is not None and not set(current.upstream) & set(upstream):
        raise ArchiveInUse(
            f"archive {url}: written by {current.describe()}; this relay follows {', '.join(upstream)}: it "
            "neither reads nor writes another primary's archive (relays of different primaries must not share "
            "an archive: give this one its own archive.url prefix; if that primary's history is to be dropped, "
            "delete owner.json from the archive first)")


def claim(store: ObjectStore, url: str, data_dir: Path, upstream: tuple[str, ...],
          take_over: bool = False) -> Owner | None:
    """Make sure this data_dir's relay, following ``upstream``, writes the archive, and renew its
    record: recorded as the writer if there is none, or (``take_over``) in place of another relay of
    one of the same primaries; WrittenByPeer if such a relay writes it, ArchiveInUse if a relay of
    other primaries does.  Returns the writer taken over from, if any.  Blocking."""
    mine = relay_id(data_dir)
    current = read_owner(store)
    if current is not None and current.relay_id != mine:  # its own record follows its configuration
        check_same_history(current, url, upstream)
    if current is not None and current.relay_id != mine and not take_over:
        raise WrittenByPeer(current, f"archive {url}: written by {current.describe()}; this relay ({mine}, "
                                     f"data_dir {data_dir}) reads it")
    now = time.time()
    since = current.since if current is not None and current.relay_id == mine else now
    owner = Owner(mine, upstream, socket.gethostname(), str(Path(data_dir).resolve()), since, now)
    store.put(OWNER_KEY, [owner.to_json()])
    confirmed = read_owner(store)  # two relays claiming at once: the last write wins, the other learns it here
    if confirmed is None or confirmed.relay_id != mine:
        if confirmed is not None and set(confirmed.upstream) & set(upstream):
            raise WrittenByPeer(confirmed, f"archive {url}: claimed at the same moment by {confirmed.describe()}")
        raise ArchiveInUse(f"archive {url}: claimed at the same moment by "
                           f"{confirmed.describe() if confirmed else 'another relay'}")
    if current is not None and current.relay_id != mine:
        log.warning("archive %s: taken over from %s", url, current.describe())
        return current
    return None


def read_owner(store: ObjectStore) -> Owner | None:
    try:
        document = store.get(OWNER_KEY)
    except ObjectMissing:
        return None
    owner = Owner.from_json(document)
    if owner is None:
        log.warning("archive: %s is not a record of binlog-relay's (%d bytes); claimed over", OWNER_KEY, len(document))
    return owner


class LeaseWatch:
    """A reader's view of the writer's lease (sans-IO: it is told what was read, and when): lapsed
    once the record has stayed the same for ``lease`` seconds of observations.  A failed read
    forgets, so the lease is counted again from the next answer."""

    def __init__(self, lease: float) -> None:
        self.lease = lease
        self._seen: Owner | None = None
        self._since = 0.0  # time.monotonic() at which the record was first seen as it is

    def observe(self, owner: Owner | None, now: float) -> bool:
        """Lapsed: no record (no writer), or the same record for a whole lease."""
        if owner is None:
            self._seen = None
            return True
        if owner != self._seen:
            self._seen, self._since = owner, now
        return now - self._since >= self.lease

    def forget(self) -> None:
        self._seen = None
