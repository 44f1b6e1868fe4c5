"""Semi-sync on the upstream leg (upstream.semi_sync): the primary marks the transactions it waits on,
and each is acknowledged by a task of its own once it is committed (fsynced, with storage.sync:
commit; decision 3) and, with semi_sync.wait_for_replicas, once enough of the relay's own semi-sync
replicas acknowledged it, so a slow disk or replica delays the primary's commit, never the
receiving (decision 5).  The deframing is replication/semisync.py's."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import trio

from ..replication.semisync import Ack, SemiSyncDeframer, build_ack
from ..replication.stream import IngestStream, Segment
from ..replication.translate import TranslatingStream
from ..storage.relaylog import RelayLog
from .connection import PrimaryConnection
from .settings import UpstreamSettings
from .status import UpstreamStatus

log = logging.getLogger("relay.upstream")  # one logger for the upstream side, as before its split

StoredEnd = tuple[str, int]  # (file, position) of the stored history


class ReplicaAcks(Protocol):
    """What the relay's semi-sync replicas acknowledged (downstream.registry.Registry)."""

    def acks_at_or_past(self, reached: Callable[[tuple[str, int]], bool]) -> int: ...

    async def wait_for_ack(self) -> None: ...


def semi_sync_receiver(stream: IngestStream | TranslatingStream,
                       to_ack: trio.MemorySendChannel[tuple[StoredEnd, Ack]]) -> Callable[[bytes | bytearray],
                                                                                       list[Segment]]:
    """``stream``'s receive for a semi-sync dump: the plain stream goes to ``stream``, and each event
    the primary waits on is handed to ``to_ack`` with where it ends in the stored history."""
    deframer = SemiSyncDeframer(stream.checksum_alg)

    def receive(data: bytes | bytearray) -> list[Segment]:
        segments: list[Segment] = []
        for piece, ack in deframer.feed(data):
            segments += stream.receive(piece)
            if ack is not None:
                to_ack.send_nowait(((stream.file or "", stream.position), ack))
        return segments

    return receive


class Acknowledger:
    """Sends the ACKs of one connection after another; remembers, across them, what it acknowledged
    without the relay's replicas."""

    def __init__(self, settings: UpstreamSettings, relay_log: RelayLog, status: UpstreamStatus,
                 replica_acks: ReplicaAcks | None) -> None:
        self.settings = settings
        self.relay_log = relay_log
        self.status = status
        self.replica_acks = replica_acks  # the relay's semi-sync replicas, for semi_sync.wait_for_replicas
        # After the replicas missed replica_timeout: the last position acknowledged without them
        self._acked_alone: StoredEnd | None = None

    async def acknowledge(self, conn: PrimaryConnection,
                          acks: trio.MemoryReceiveChannel[tuple[StoredEnd, Ack]]) -> None:
        async for stored_end, ack in acks:
            while not self.relay_log.committed_past(*stored_end):
                await self.relay_log.wait_for_commit(self.relay_log.committed)
            if self.settings.wait_for_replicas and self.replica_acks is not None:
                await self._wait_for_replicas(stored_end)
            await conn.stream.send_all(build_ack(ack))
            self.status.semi_sync_acks += 1

    async def _wait_for_replicas(self, stored_end: StoredEnd) -> None:
        """Until semi_sync.wait_for_replicas of the relay's semi-sync replicas acknowledged
        ``stored_end``.  Past replica_timeout the relay acknowledges alone, as a primary falls back
        to asynchronous replication, until the replicas have acknowledged what it acknowledged
        alone (they caught up)."""
        acks = self.replica_acks
        assert acks is not None

        def acknowledged(file: str, position: int) -> bool:
            reached = acks.acks_at_or_past(lambda acked: self.relay_log.at_or_past(acked, file, position))
            return reached >= self.settings.wait_for_replicas

        if self._acked_alone is not None:
            if not acknowledged(*self._acked_alone):
                self._acked_alone = stored_end
                return
            log.info("upstream: semi-sync: the relay's replicas caught up; waiting for their ACKs again")
            self._acked_alone = None
        with trio.move_on_after(self.settings.replica_timeout):
            while not acknowledged(*stored_end):
                await acks.wait_for_ack()
            return
        self._acked_alone = stored_end
        self.status.replica_ack_timeouts += 1
        log.warning("upstream: semi-sync: fewer than %d replicas of the relay acknowledged %s:%d within %.1fs; "
                    "acknowledging without them until they catch up", self.settings.wait_for_replicas,
                    *stored_end, self.settings.replica_timeout)
