"""Damaged closed stored files (found cut short at start-up, or shorter than the primary's) fetched
again from the primary that wrote them: a non-blocking dump of that one file on a connection of its
own.  Ingest only talks to the primary; storage writes the copy and decides whether it replaces
the damaged file (storage/repair.py, RelayLog.replace_damaged)."""

from __future__ import annotations

import logging

import trio

from ..protocol.codes import BINLOG_DUMP_NON_BLOCK
from ..replication.stream import IngestStream, ResumePoint, Segment, StreamError, UpstreamEnded
from ..storage.relaylog import RelayLog
from ..storage.repair import FetchedCopy
from .connection import RECEIVE_SIZE, PrimaryConnection, connect
from .errors import FATAL, RETRYABLE, describe
from .settings import Candidate, UpstreamSettings

log = logging.getLogger("relay.upstream")  # one logger for the upstream side, as before its split


async def fetch_damaged_again(settings: UpstreamSettings, relay_log: RelayLog, candidate: Candidate | None,
                              primary_has: set[str | None]) -> None:
    """Each damaged file the primary still has is fetched and put in place if the stored whole events
    are a prefix of the primary's copy; otherwise it stays as it is (served up to the damage)."""
    for name in [name for name in relay_log.damaged if name in primary_has]:
        try:
            conn = await connect(settings, candidate)
            try:
                copy = await _dump_file(conn, settings, relay_log, name)
            finally:
                await trio.aclose_forcefully(conn.stream)
            copy.put_in_place()
        except (*RETRYABLE, *FATAL) as exc:
            log.warning("upstream: could not fetch %s again from %s: %s; it is served up to the damage",
                        name, candidate, describe(exc))


async def _dump_file(conn: PrimaryConnection, settings: UpstreamSettings, relay_log: RelayLog,
                     name: str) -> FetchedCopy:
    """The primary's ``name``, whole, written by storage beside the stored one."""
    stream = IngestStream(ResumePoint(name, 4), await conn.set_dump_variables(settings))
    conn.protocol.binlog_dump(name, 4, settings.relay_server_id, conn.dump_flags() | BINLOG_DUMP_NON_BLOCK)
    await conn.flush()
    with FetchedCopy(relay_log, name) as copy:  # removed if the dump fails
        while True:
            with trio.fail_after(2 * settings.heartbeat_period):
                data = await conn.stream.receive_some(RECEIVE_SIZE)
            if not data:
                raise ConnectionError("the primary closed the connection")
            ended: UpstreamEnded | None = None
            try:
                segments = stream.receive(data)
            except UpstreamEnded as end:  # the whole dump may come in one read, its EOF with it
                segments, ended = end.segments, end
            if _copied(copy, segments, name):
                return copy
            if ended is not None:
                raise ended


def _copied(copy: FetchedCopy, segments: list[Segment], name: str) -> bool:
    """Appends ``segments`` of ``name`` to the copy; True once the next file begins (it is whole)."""
    for segment in segments:
        if segment.file != name:
            return True
        if segment.start != copy.end:
            raise StreamError(f"{name}: the primary sent {segment.start}, expected {copy.end}")
        copy.append(segment.chunks)
    return False
