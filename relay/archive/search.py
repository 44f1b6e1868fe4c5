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
    FileStartGtids,
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
        # what fetched pairs of files that hold no transaction at or before the moment begin with
        # (their first transaction, None: they hold none): where the answer's "next" may be
        firsts: dict[int, dict[str, Any] | None] = {}
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
                    answer["next"] = self._first_after(index + 2, moment, firsts) or local["next"]
                return answer
            firsts[index] = answer["next"]
        return local

    def _first_after(self, start: int, moment: int, firsts: dict[int, dict[str, Any] | None]) -> dict[str, Any] | None:
        """The first transaction committed after ``moment`` in the archived files from
        ``self.names[start]`` on, those before it holding none (None: the later ones hold none
        either).  A file whose commit times are not known (commit_lo None: no commit, or a meta
        written without them) may hold some: at_time fetched it already, with the file after it
        (``firsts``); a file that begins after the moment begins with it."""
        for index in range(start, len(self.names)):
            if index - 1 in firsts:  # [index - 1, index], and the first holds none
                if firsts[index - 1] is not None:
                    return firsts[index - 1]
                continue
            if index in firsts:  # [index, index + 1]
                if firsts[index] is not None:
                    return firsts[index]
                continue
            with self._fetched([self.names[index]]) as searched:
                found: dict[str, Any] | None = StoredHistory(searched).at_time(moment)["next"]
            if found is not None:
                return found
        return None

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
        starts.append(self._first_local_start().previous_gtids)
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
        """The archived file that may hold a MariaDB ``gtid``: the one the (domain, server_id) pair's
        last GTID before it is below ``gtid`` and its last GTID before the next file at or above
        it.  A file's GTID_LIST is the binlog state at its start, the last GTID of every pair
        written before it: a pair it lacks had nothing written before the file (0).  The next
        file of the newest archived one is the oldest local one (without a GTID_LIST read there,
        the newest archived file is not bounded).  A pair's seq_nos grow through the binlog (as
        gtid_strict_mode makes sure)."""
        pair = (gtid.domain_id, gtid.server_id)
        before = [self._state(self._with_start(name).start_state or ()).get(pair, 0) for name in self.names]
        local_start = self._first_local_start().gtid_list
        after: list[int | None] = [*before[1:], self._state(local_start).get(pair, 0) if local_start else None]
        for name, low, high in zip(self.names, before, after, strict=True):
            if low < gtid.seq_no and (high is None or gtid.seq_no <= high):
                return name
        return None

    def _first_local_start(self) -> FileStartGtids:
        """The GTID_LIST or PREVIOUS_GTIDS of the file after self.names, not of the oldest stored
        now: retention may have purged it since (archived first: it is read from the store then)."""
        assert self.first_local is not None  # StoredHistory refused a data_dir without files
        try:
            with open(self.data_dir / self.first_local, "rb") as first_local:
                return file_start_gtids(first_local.read(START_READ))
        except FileNotFoundError:
            return read_file_start_gtids(self.store, self.first_local, self.settings.keks)

    def _with_start(self, name: str) -> ArchivedFile:
        archived = self.catalog[name]
        if archived.start_state is None:
            start = read_file_start_gtids(self.store, name, self.settings.keks)
            archived = self.catalog[name] = replace(archived, start_state=start.gtid_list,
                                                    previous_gtids=start.previous_gtids)
        return archived

    @staticmethod
    def _state(gtid_list: tuple[str, ...]) -> dict[tuple[int, int], int]:
        """A GTID_LIST's last seq_no of each (domain, server_id)."""
        state = {}
        for text in gtid_list:
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
