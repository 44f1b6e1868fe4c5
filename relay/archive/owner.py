"""One archive, one relay: which relay writes an archive, told by an object beside its files.

Two relays writing one archive (the same ``archive.url`` copied into two configurations) would
each take the other's files for their own: a relay of another primary would see its own file
names archived, purge them locally and serve the other history's bytes under them; two mirrors of
one primary would upload the same file at the same moment, and the object of one with the meta
document of the other reads as damaged, while both have purged their local copies.  So the first
relay to write an archive records itself in ``owner.json`` (a relay id kept in its data_dir, the
primaries it follows, its host and data_dir for the operator), and a relay with another id refuses
to write there (it ingests and serves as usual; its archive lag grows and the alert fires).

A relay stood up on an empty disk from the archive (archiver.seed_from_archive) takes the archive
over when it follows a primary the record names: that is a relay rebuilt after its disk was lost,
and the relay it replaces, if it still runs, stops writing at its next check.  A relay of other
primaries does not: standing up from another primary's history, it would also take that archive
from the relay still writing it.  Archives written before this record existed are claimed by the
first relay to look.
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


class ArchiveInUse(FatalError):
    """The archive is written by another relay: an operator must give one of them its own prefix."""


@dataclass(frozen=True)
class Owner:
    relay_id: str
    upstream: tuple[str, ...]  # host:port of the primaries it follows, as configured
    host: str
    data_dir: str
    since: float  # Unix time of the claim

    def to_json(self) -> bytes:
        document = {"format": OWNER_FORMAT, "relay_id": self.relay_id, "upstream": list(self.upstream),
                    "host": self.host, "data_dir": self.data_dir, "since": self.since}
        return (json.dumps(document, sort_keys=True) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes) -> Owner | None:
        """The record, or None for bytes that are not one (claimed over, as a missing record)."""
        try:
            document = json.loads(data)
            if document.get("format") != OWNER_FORMAT:
                return None
            return cls(str(document["relay_id"]), tuple(str(each) for each in document["upstream"]),
                       str(document["host"]), str(document["data_dir"]), float(document["since"]))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.since))
        return (f"relay {self.relay_id} (following {', '.join(self.upstream) or 'no primary'}; host {self.host}, "
                f"data_dir {self.data_dir}, since {when})")


def relay_id(data_dir: Path) -> str:
    """This data_dir's relay id, made the first time it is asked for (durably: a relay that lost it
    would be refused by its own archive)."""
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


def claim(store: ObjectStore, url: str, data_dir: Path, upstream: tuple[str, ...],
          take_over: bool = False) -> Owner | None:
    """Make sure this data_dir's relay, following ``upstream``, writes the archive: recorded as its
    owner if it has none, or (``take_over``) if the owner follows one of the same primaries;
    ArchiveInUse if another relay writes it.  Returns the owner taken over from, if any.  Blocking."""
    mine = relay_id(data_dir)
    current = read_owner(store)
    if current is not None and current.relay_id == mine and current.upstream == upstream:
        return None
    if current is not None and current.relay_id != mine:
        if not take_over:
            raise ArchiveInUse(
                f"archive {url}: written by {current.describe()}, not by this relay ({mine}, data_dir {data_dir}); "
                "two relays must not share an archive: give this one its own archive.url prefix (if that relay "
                "is gone for good, stand this one up from the archive on an empty data_dir)")
        if not set(current.upstream) & set(upstream):
            raise ArchiveInUse(
                f"archive {url}: written by {current.describe()}; this relay follows {', '.join(upstream)}: it "
                "does not stand up from another primary's archive (if that is meant, delete owner.json from the "
                "archive first)")
    owner = Owner(mine, upstream, socket.gethostname(), str(Path(data_dir).resolve()), time.time())
    store.put(OWNER_KEY, [owner.to_json()])
    confirmed = read_owner(store)  # two relays claiming at once: the last write wins, the other learns it here
    if confirmed is None or confirmed.relay_id != mine:
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
