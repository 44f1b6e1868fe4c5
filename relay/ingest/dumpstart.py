"""A dump started on a vetted connection: the replica's opening queries (docs/protocol.md 3.1 / 3.2),
then by file and position from where the stored files end (a mirror of the primary's coordinates,
decision 1), or by GTID into files of the relay's own (after a switch of primary, decision 8)."""

from __future__ import annotations

import logging
import time

from ..binlog import events as ev
from ..binlog.names import next_file_name
from ..candidates import CandidateFacts, check_resume_file, cut_short, follows_by_position
from ..errors import RetryableError
from ..gtid.gtid import format_gtid_position
from ..protocol.codes import BINLOG_SEND_ANNOTATE_ROWS_EVENT
from ..protocol.packets import ServerError
from ..replication.stream import IngestStream
from ..replication.translate import TranslatingStream
from ..storage.gtidindex import GtidIndex
from ..storage.relaylog import RelayLog
from .connection import PrimaryConnection
from .errors import FatalIngestError
from .refetch import fetch_damaged_again
from .settings import UpstreamSettings
from .startgtid import file_holding
from .status import UpstreamStatus

log = logging.getLogger("relay.upstream")  # one logger for the upstream side, as before its split


class DumpStarter:
    def __init__(self, settings: UpstreamSettings, relay_log: RelayLog, status: UpstreamStatus,
                 gtid_index: GtidIndex) -> None:
        self.settings = settings
        self.relay_log = relay_log
        self.status = status
        self._gtid_index = gtid_index

    async def prepare(self, conn: PrimaryConnection) -> int:
        """The replica's opening queries (docs/protocol.md 3.1 / 3.2); returns the checksum algorithm."""
        greeting = conn.greeting
        self.status.server_version = greeting.server_version
        alg = await conn.set_dump_variables(self.settings)
        clock = await conn.rows("SELECT UNIX_TIMESTAMP()")
        if clock and clock[0][0] and clock[0][0].split(".")[0].isdigit():
            # as a replica's clock_diff_with_master: event timestamps are in the primary's time
            self.status.clock_difference = time.time() - int(clock[0][0].split(".")[0])
        self.status.checksum_alg = alg
        self.status.semi_sync = self.settings.semi_sync and await _ask_for_semi_sync(conn, greeting.is_mariadb)
        return alg

    async def start(self, conn: PrimaryConnection, checksum_alg: int,
                    facts: CandidateFacts) -> IngestStream | TranslatingStream:
        own = self.relay_log.state.own_files_from is not None
        if own or not follows_by_position(facts, self.relay_log.resume_point().origin_server_id):
            return await self._start_gtid_dump(conn, checksum_alg, facts)
        return await self._start_mirror_dump(conn, checksum_alg)

    async def _start_mirror_dump(self, conn: PrimaryConnection, checksum_alg: int) -> IngestStream:
        resume = self.relay_log.resume_point()
        file = resume.file or await self._first_file(conn)
        await self._check_history(conn, resume.file, resume.position)
        if self.relay_log.damaged:
            await fetch_damaged_again(self.settings, self.relay_log, self.status.current,
                                      {row[0] for row in await conn.rows("SHOW BINARY LOGS")})
        stream = IngestStream(resume, checksum_alg)
        conn.protocol.register_slave(self.settings.relay_server_id)
        await conn.command()
        conn.protocol.binlog_dump(file, resume.request_position, self.settings.relay_server_id, conn.dump_flags())
        await conn.flush()
        log.info("upstream: dumping from %s:%d", file, resume.request_position)
        return stream

    async def _first_file(self, conn: PrimaryConnection) -> str:
        """Where a fresh data_dir begins: upstream.start.file, the file holding upstream.start.gtid, or
        the primary's first binlog."""
        if self.settings.start_file:
            return self.settings.start_file
        rows = await conn.rows("SHOW BINARY LOGS")
        if not rows:
            # A primary without log_bin refuses SHOW BINARY LOGS (ERR 1381); an empty list is an
            # upstream with nothing to read yet: another relay that has stored nothing so far.
            raise RetryableError("the upstream lists no binary logs yet (a relay that has stored nothing?)")
        if self.settings.start_gtid:
            return await file_holding(conn, [row[0] or "" for row in rows], self.settings.start_gtid)
        return rows[0][0] or ""

    async def _check_history(self, conn: PrimaryConnection, resume_file: str | None, position: int) -> None:
        """The primary must still hold the file we resume, at least as long as what we stored,
        and closed files both sides have must be the same size: a stored one that is shorter was cut
        short (a power cut with storage.sync: none) and is fetched again if it is a prefix of the
        primary's (refetch.py); a longer one is another history (candidates.py decides)."""
        if resume_file is None:
            return
        try:
            rows = await conn.rows("SHOW BINARY LOGS")
        except ServerError as exc:
            log.warning("upstream: cannot list the primary's binlogs (%s); skipping the size check", exc)
            return
        primary_sizes = {name: int(size or 0) for name, size, *_ in rows if name is not None}
        check_resume_file(primary_sizes, resume_file, position)
        for name in self.relay_log.files[:-1]:
            if name not in primary_sizes or name in self.relay_log.damaged:  # damage was reported at start-up
                continue
            if cut_short(name, self.relay_log.path(name).stat().st_size, primary_sizes[name]):
                self.relay_log.mark_cut_short(name, primary_sizes[name])

    async def _start_gtid_dump(self, conn: PrimaryConnection, checksum_alg: int,
                               facts: CandidateFacts) -> TranslatingStream:
        """Follow a primary whose coordinates are not the stored ones, from the relay's GTID state
        (strict: a hole is an error), into the relay's own files (replication.translate)."""
        relay_log = self.relay_log
        if facts.binlog_state is None or relay_log.committed is None:
            raise FatalIngestError("the relay can follow another primary only by MariaDB GTID, from stored history")
        state = self._gtid_index.binlog_state()
        connect_state = format_gtid_position(state.most_recent())
        file, end = relay_log.committed
        own_from = relay_log.state.own_files_from
        last_event = relay_log.resume_point().last_event
        ends_with_rotate = last_event is not None and last_event[4] == ev.ROTATE_EVENT
        # The primary's events go to a file the relay opens (its FDE and a GTID_LIST of the relay's
        # state first) unless the current file is already one of the relay's own and open. A crash
        # may leave a switch or a rotation half done: the first own file not created yet, or
        # empty, or the current file closed by its ROTATE and the next one not created.
        switching = own_from is None or own_from not in relay_log.files or end == 4 or ends_with_rotate
        if own_from is None:
            relay_log.begin_own_coordinates(file if end == 4 else next_file_name(file))
        await conn.query(f"SET @slave_connect_state = '{connect_state}'")
        await conn.query("SET @slave_gtid_strict_mode = 1")
        conn.protocol.register_slave(self.settings.relay_server_id)
        await conn.command()
        conn.protocol.binlog_dump("", 4, self.settings.relay_server_id, BINLOG_SEND_ANNOTATE_ROWS_EVENT)
        await conn.flush()
        log.info("upstream: following server_id %d by GTID from %s%s", facts.server_id, connect_state,
                 " into a new file of the relay's own" if switching else "")
        return TranslatingStream(file, end, checksum_alg, state if switching else None, ends_with_rotate)


async def _ask_for_semi_sync(conn: PrimaryConnection, is_mariadb: bool) -> bool:
    """Announce the relay as a semi-sync replica where the primary can run semi-sync (an
    empty answer means it cannot: replication stays asynchronous, and the log says so)."""
    if not is_mariadb:
        log.warning("upstream: semi_sync is implemented for MariaDB primaries; replicating asynchronously")
        return False
    if not await conn.rows("SHOW VARIABLES LIKE 'rpl_semi_sync_master_enabled'"):
        log.warning("upstream: the primary has no semi-sync; replicating asynchronously")
        return False
    await conn.query("SET @rpl_semi_sync_slave = 1")
    log.info("upstream: semi-sync: each transaction the primary waits on is acknowledged once on disk")
    return True
