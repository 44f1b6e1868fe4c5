"""`binlog-relay search` over the archived files too (with ``--config``): where the stored history
starts after the moment or lacks the GTID, the archive's list (archive.json in data_dir, written by
the relay) says which archived file may hold the answer (its first commit time, the GTID_LIST it
starts with); that file, and the one after it when the answer's "next" is there, are fetched into a
temporary directory and searched as stored files are (storage/search.py).  Without that list (the
relay never listed this archive: the store was down since its start, or data_dir came from
``binlog-relay import``), the store is listed here, so that an answer never leaves the archive out
unsaid: a store that cannot be reached is an error, not a local-only answer.  Read only: the relay
may be running.  Blocking.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..gtid.gtid import Gtid, parse_gtid_position
from ..gtid.mysqlgtid import GtidSet
from ..storage.index import read_index, write_index
from ..storage.search import StoredHistory
from .archiver import ArchiveSettings, load_catalog
from .objects import (
    START_READ,
    ArchivedFile,
    ArchivedFileReader,
    file_start_gtids,
    list_archive,
    read_file_start_gtids,
)
from .store import ObjectStore, open_store


class ArchivedHistory:
    def __init__(self, settings: ArchiveSettings, data_dir: Path) -> None:
        self.settings = settings
        self.data_dir = data_dir
        self._store: ObjectStore | None = None
        # listed files have their commit times if their meta documents do (at_time reads the others
        # newest first), not their GTID_LISTs (read when a GTID is looked for)
        self.catalog = load_catalog(data_dir, str(settings.store.url)) or list_archive(self.store)
        local = read_index(data_dir)
        self.first_local = local[0] if local else None
        # the archived files older than the oldest stored one: the history before the local one
        self.names = sorted(name for name in self.catalog if self.first_local is None or name < self.first_local)

    @property
    def store(self) -> ObjectStore:
        if self._store is None:
            self._store = open_store(self.settings.store)
        return self._store

    def at_time(self, moment: int, local: dict[str, Any]) -> dict[str, Any]:
        """The local answer, or, when the local history begins after ``moment``, the archive's."""
        if local["transaction"] is not None or not self.names:
            return local
        for index in reversed(range(len(self.names))):
            name = self.names[index]
            first = self.catalog[name].commit_lo
            if first is not None and first > moment and index > 0:
                continue  # it begins after the moment: an older file holds the answer
            following = self.names[index + 1:index + 2]
            with self._fetched([name, *following]) as searched:
                answer = StoredHistory(searched).at_time(moment)
            if answer["transaction"] is not None or index == 0:
                if answer["next"] is None:
                    answer["next"] = local["next"]
                return answer
        return local

    def holding(self, text: str, local: dict[str, Any]) -> dict[str, Any]:
        """MariaDB GTIDs the local history lacks, looked for in the archived file whose GTID_LIST
        and the next one's enclose them; for a MySQL GTID set, the archived files holding part of it."""
        if not self.names:
            return local
        if "gtids" not in local:
            return self._holding_set(GtidSet.parse(text), local)
        wanted = parse_gtid_position(text)
        missing = [entry for entry in local["gtids"] if entry["transaction"] is None]
        files = set(local["files"])
        for entry in missing:
            gtid = wanted[int(entry["gtid"].split("-")[0])]
            name = self._file_holding(gtid)
            if name is None:
                continue
            with self._fetched([name]) as searched:
                found = StoredHistory(searched).holding(str(gtid))
            entry["transaction"] = found["gtids"][0]["transaction"]
            files.update(found["files"])
        local["files"] = sorted(files, key=lambda name: (name not in self.names, name))
        return local

    def _holding_set(self, wanted: GtidSet, local: dict[str, Any]) -> dict[str, Any]:
        """An archived MySQL file holds what the next file's PREVIOUS_GTIDS has and its own has not
        (the next file: the next archived one, or the oldest local one); one without PREVIOUS_GTIDS
        (MariaDB's) holds no MySQL GTID."""
        starts = [self._with_start(name).previous_gtids for name in self.names]
        # the file that follows self.names, not the oldest stored now: retention may have purged it since
        assert self.first_local is not None  # StoredHistory refused a data_dir without files
        with open(self.data_dir / self.first_local, "rb") as first_local:
            starts.append(file_start_gtids(first_local.read(START_READ)).previous_gtids)
        files = []
        for index, name in enumerate(self.names):
            before, after = starts[index], starts[index + 1]
            if before is None or after is None:
                continue
            held = GtidSet.parse(after).minus(GtidSet.parse(before))
            common = held.minus(held.minus(wanted))
            if common:
                files.append({"file": name, "gtids": str(common).replace("\n", "")})
        return {**local, "files": files + local["files"]}

    def _file_holding(self, gtid: Gtid) -> str | None:
        states = [self._state(self._with_start(name)) for name in self.names]
        for index, name in enumerate(self.names):
            before = states[index].get((gtid.domain_id, gtid.server_id), 0)
            after = states[index + 1].get((gtid.domain_id, gtid.server_id)) if index + 1 < len(states) else None
            if before < gtid.seq_no and (after is None or gtid.seq_no <= after):
                return name
        return None

    def _with_start(self, name: str) -> ArchivedFile:
        archived = self.catalog[name]
        if archived.start_state is None:
            start = read_file_start_gtids(self.store, name, self.settings.keks)
            archived = self.catalog[name] = replace(archived, start_state=start.gtid_list,
                                                    previous_gtids=start.previous_gtids)
        return archived

    @staticmethod
    def _state(archived: ArchivedFile) -> dict[tuple[int, int], int]:
        state = {}
        for text in archived.start_state or ():
            domain, server, seq_no = map(int, text.split("-"))
            state[(domain, server)] = seq_no
        return state

    @contextmanager
    def _fetched(self, names: list[str]) -> Iterator[Path]:
        """A temporary data_dir holding the archived ``names``, fetched frame by frame."""
        with tempfile.TemporaryDirectory(prefix="binlog-relay-search-") as tmp:
            directory = Path(tmp)
            for name in names:
                ArchivedFileReader(self.store, name, self.settings.keks).copy_to(directory / name)
            write_index(directory, names)
            yield directory
