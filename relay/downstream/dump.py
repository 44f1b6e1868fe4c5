"""A binlog dump (COM_BINLOG_DUMP): where it starts, then stored events -> ``outbound`` filters ->
``ServerConnection.send_events``, waiting for commits in between (the trio shell of the dump path).

Reading the stored files is ``storage.reader``'s, choosing what a client gets is
``replication.outbound``'s and ``replication.gtidstart``'s, framing and sequence ids are
``protocol.server``'s alone: this module hands the connection events (or a block the C loop framed
from the connection's sequence id, and how many packets it holds), never a header or an id.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from ..binlog import events as ev
from ..binlog.groups import GroupTracker
from ..errors import Refusal
from ..gtid.gtid import GtidError, parse_gtid_position
from ..gtid.mysqlgtid import ExcludedGroups, GtidSet, MysqlGtidError
from ..gtid.spans import excluded_until, span_holding
from ..protocol import server as proto
from ..protocol.codes import (
    BINLOG_DUMP_NON_BLOCK,
    BINLOG_SEND_ANNOTATE_ROWS_EVENT,
    ER_MALFORMED_GTID_SET_ENCODING,
    ER_MASTER_FATAL_ERROR_READING_BINLOG,
    USE_HEARTBEAT_EVENT_V2,
)
from ..replication.gtidstart import GtidStart, SeekPlan
from ..replication.outbound import _GROUP_STARTS, DumpOptions, OutboundStream, frame_block, framed_capacity
from ..replication.semisync import AckReader, SemiSyncError
from ..storage.gtidindex import GtidLookupError
from ..storage.reader import Available, FetchArchived, FetchGoesOn, FileStart, StoredFileDamaged, TailReader
from ..storage.scan import BLOCK_SIZE, count_gtid_events
from ..storage.shelf import ArchiveReadError
from ..trio_run import lone_exceptions
from .context import SessionContext
from .registry import DumpState

log = logging.getLogger(__name__)

# The fast path's blocks of all dumps together stay within this: each dump holds a framed copy of its
# block while the socket takes it (the read buffer is one for all, Registry.read_buffer, and a finished
# file's mapped pages are handed back after each block): up to 32 dumps read 1 MiB at a time, 100 read
# 256 KiB.  A block costs about as much in Python and in faults whatever its size (bench/capacity.py at
# 100 clients: with 128 KiB, 0.88-0.90 CPU s per GiB served and 109 MiB of RSS; with 256 KiB and a read
# buffer per dump, 0.68 and 152 MiB; shared, 0.72 and 119 MiB).
SERVE_BLOCK_BUDGET = 32 << 20
MIN_SERVE_BLOCK = 64 << 10


@dataclass(frozen=True)
class DumpRequest:
    """COM_BINLOG_DUMP and what the client said before it."""

    file: str
    position: int
    flags: int
    server_id: int
    registered_server_id: int | None  # of COM_REGISTER_SLAVE on this connection
    variables: dict[str, object]  # the user variables it set (@master_binlog_checksum, ...)
    mysql_gtid_set: bytes | None = None  # COM_BINLOG_DUMP_GTID: the GTID set the replica has (encoded)
    mysql_flavour: bool = False  # the history served is MySQL's: flag 0x02 asks for heartbeat v2

    def flag(self, name: str) -> bool:
        """A boolean user variable (@slave_gtid_strict_mode ...): set and not 0."""
        return str(self.variables.get(name, 0)) not in ("0", "None", "False", "")

    @property
    def blocking(self) -> bool:
        return not self.flags & BINLOG_DUMP_NON_BLOCK and self.server_id != 0

    @property
    def semi_sync(self) -> bool:
        return self.flag("rpl_semi_sync_slave") or self.flag("rpl_semi_sync_replica")

    @property
    def heartbeat_period(self) -> float | None:
        for name in ("master_heartbeat_period", "source_heartbeat_period"):
            value = self.variables.get(name)
            if isinstance(value, (int, float)) and value > 0:
                return value / 1e9
        return None

    def options(self, relay_server_id: int, ignore_server_ids: frozenset[int]) -> DumpOptions:
        variables = self.variables
        checksum = variables.get("master_binlog_checksum", variables.get("source_binlog_checksum"))
        capability = variables.get("mariadb_slave_capability")
        return DumpOptions(
            relay_server_id=relay_server_id,
            # Only a registered replica is "the replica itself" for the loop filter: tools such as
            # mariadb-binlog dump as server_id 1 by default, often the primary's own id.
            replica_server_id=self.server_id if self.server_id == self.registered_server_id else None,
            checksum_declared="master_binlog_checksum" in variables or "source_binlog_checksum" in variables,
            first_rotate_crc=str(checksum).upper() == "CRC32",
            ignore_server_ids=ignore_server_ids,
            # flag 0x02 is MariaDB's "send annotate rows" and MySQL's USE_HEARTBEAT_EVENT_V2
            send_annotate_rows=bool(self.flags & BINLOG_SEND_ANNOTATE_ROWS_EVENT) or self.mysql_flavour,
            heartbeat_v2=self.mysql_flavour and bool(self.flags & USE_HEARTBEAT_EVENT_V2),
            # @mariadb_slave_capability: 0 (nothing understood) when unset or not a number
            replica_capability=int(capability) if isinstance(capability, (int, float)) else 0)


class DumpError(Refusal):
    """The dump is refused or cannot go on: the client gets ERR ``code`` with this text."""

    def __init__(self, message: str, code: int = ER_MASTER_FATAL_ERROR_READING_BINLOG) -> None:
        super().__init__(message)
        self.code = code


class Dump:
    """One dump from the stored files to one client, until it goes away (or, non-blocking, the end)."""

    def __init__(self, context: SessionContext, request: DumpRequest, conn: proto.ServerConnection,
                 flush: Callable[[], Awaitable[None]], state: DumpState,
                 receive: Callable[[], Awaitable[bytes | bytearray]] | None = None) -> None:
        self.context = context
        self.request = request
        self.receive = receive
        # A semi-sync replica is asked to acknowledge each transaction when the relay's own ACK to
        # its primary waits for its replicas (semi_sync.wait_for_replicas); else never.
        self.wants_acks = request.semi_sync and context.wait_for_replica_acks and receive is not None
        self._groups = GroupTracker()
        self.conn = conn
        self.flush = flush
        self.state = state
        self._block_size = 0  # of the fast path's next block (0: none yet)
        self._framed: bytearray | None = None  # its packets, framed (see _framed_buffer)
        self._told_lost_tail_wait = False

    def plan(self) -> tuple[TailReader, GtidStart | ExcludedGroups | None]:
        """Where the dump starts: the requested file/position, a MariaDB GTID start, or the GTID
        set of a MySQL replica (COM_BINLOG_DUMP_GTID)."""
        request, context = self.request, self.context
        if request.mysql_gtid_set is not None:
            return self._plan_mysql(request.mysql_gtid_set)
        connect_state = request.variables.get("slave_connect_state")
        if connect_state is None or not context.facts().is_mariadb:
            return TailReader(context.relay_log, request.file, request.position), None
        try:
            plan = context.gtid_index.plan_dump(parse_gtid_position(str(connect_state)),
                                                request.flag("slave_gtid_strict_mode"),
                                                request.flag("slave_gtid_ignore_duplicates"))
        except GtidError as malformed:
            raise DumpError(str(malformed), malformed.code) from None
        return TailReader(context.relay_log, plan.file, 4), plan.start

    def _plan_mysql(self, encoded: bytes) -> tuple[TailReader, ExcludedGroups]:
        try:
            replica_has = GtidSet.decode(encoded)
        except MysqlGtidError as malformed:
            raise DumpError(str(malformed), ER_MALFORMED_GTID_SET_ENCODING) from None
        index = self.context.mysql_gtid_index
        if self.request.file:
            reader = TailReader(self.context.relay_log, self.request.file, self.request.position)
        else:
            reader = TailReader(self.context.relay_log, index.plan_dump(replica_has), 4)
        return reader, ExcludedGroups(replica_has)

    async def planned(self) -> tuple[TailReader, GtidStart | ExcludedGroups | None]:
        """plan(), which a blocking GTID start ahead of the stored history retries at each commit
        while a power cut may have taken what the replica was sent (RelayLog.tail_may_be_lost)."""
        relay_log = self.context.relay_log
        while True:
            try:
                return self.plan()
            except GtidLookupError as ahead:
                if not (self.request.blocking and relay_log.tail_may_be_lost()):
                    raise
                self._log_lost_tail_wait(str(ahead))
                await relay_log.wait_for_commit(relay_log.committed)

    def _log_lost_tail_wait(self, asked: str) -> None:
        if not self._told_lost_tail_wait:
            self._told_lost_tail_wait = True
            log.info("downstream %s: %s; the relay did not stop cleanly (storage.sync: none) and may have lost "
                     "what it sent before: waiting for ingest to fetch it again", self.state.peer, asked)

    async def run(self, reader: TailReader, outbound: OutboundStream) -> None:
        relay_log = self.context.relay_log
        while (pending := reader.first_file_pending()) is not None:
            if isinstance(pending, FetchArchived):
                await self._fetch_archived(reader, pending.file, position=reader.position)
            elif self.request.blocking:
                if relay_log.tail_may_be_lost() and reader.past_the_stored_end():
                    self._log_lost_tail_wait(f"asks for {reader.file}:{reader.position}, past the stored end")
                await relay_log.wait_for_commit(pending.seen)
            else:
                break  # start() refuses it as a primary does
        try:
            reader.start()
        except StoredFileDamaged as damage:
            raise self._damaged(damage) from None
        self.conn.start_dump()
        if self.wants_acks:
            with lone_exceptions():  # trio >= 0.25 wraps them in groups: the session handles them by kind
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read_acks, nursery.cancel_scope)
                    await self._pump(reader, outbound)
                    nursery.cancel_scope.cancel()
        else:
            await self._pump(reader, outbound)

    async def _read_acks(self, done: trio.CancelScope) -> None:
        acks = AckReader()
        while data := await self.receive():  # type: ignore[misc]
            try:
                received = acks.feed(data)
            except SemiSyncError as bad:
                log.warning("downstream %s: %s; ending its dump", self.state.peer, bad)
                done.cancel()
                return
            for ack in received:
                self.context.registry.note_ack(self.state, ack.file, ack.position)
        done.cancel()  # the replica closed the connection

    async def _pump(self, reader: TailReader, outbound: OutboundStream) -> None:
        try:
            while True:
                step = reader.poll()
                if isinstance(step, FileStart):
                    self.conn.send_events(outbound.file_start(step.file, step.position, step.fde, step.first))
                    self._advance(reader, outbound)
                    self.state.file, self.state.position = step.file, step.position
                elif isinstance(step, Available):
                    await self._send_run(reader, outbound, step.end)
                elif isinstance(step, FetchArchived):
                    self.conn.send_events([outbound.announce(step.file)])
                    await self.flush()
                    await self._fetch_archived(reader, step.file, acks_watch=self.wants_acks)
                elif isinstance(step, FetchGoesOn):
                    await self.flush()
                    shelf = self.context.relay_log.shelf
                    assert shelf is not None
                    await self._wait_for_archive(shelf.wait(step.copy, step.position), step.copy.name, step.position,
                                                 acks_watch=self.wants_acks)
                elif not self.request.blocking:
                    self.conn.send_eof()
                    await self.flush()
                    return
                else:
                    await self.flush()
                    await self._wait_for_more(step.seen, outbound)
        except StoredFileDamaged as damage:
            raise self._damaged(damage) from None

    async def _fetch_archived(self, reader: TailReader, file: str, acks_watch: bool = False,
                              position: int = 4) -> None:
        """An archived file the dump reaches is fetched back (once for every dump reading it): its
        copy is read as it grows, so the dump goes on once its first events (or those at
        ``position``, where a dump starts) are there, the reader holding the copy."""
        shelf = self.context.relay_log.shelf
        assert shelf is not None  # only a relay log with an archive names archived files

        async def first_events() -> None:
            copy = await shelf.begin(file)
            if position > 4:
                await shelf.wait(copy, position)
            reader.hold(file)  # before any checkpoint: the copy could leave the shelf meanwhile

        await self._wait_for_archive(first_events(), file, position, acks_watch)

    async def _wait_for_archive(self, fetched: Awaitable[object], file: str, position: int, acks_watch: bool) -> None:
        """Wait for more of an archived file.  A client that leaves meanwhile ends the dump (and the
        fetch, if nobody else wants it): the ACK reader sees it go (``acks_watch``), or else a
        watch of the connection, where a dump's client sends nothing but ACKs."""
        try:
            if acks_watch or self.receive is None:
                await fetched
            else:
                await self._unless_client_leaves(fetched)
        except ArchiveReadError as exc:
            log.error("downstream %s: %s", self.state.peer, exc)
            raise DumpError(f"{exc}; the first event '{file}' at {position}, the last event read from '{file}' at "
                            f"{position}, the last byte read from '{file}' at {position}.") from None

    async def _unless_client_leaves(self, work: Awaitable[object]) -> None:
        receive = self.receive
        assert receive is not None
        left = False

        async def watch(done: trio.CancelScope) -> None:
            nonlocal left
            try:
                await receive()  # the connection closed (b""), or a client spoke out of turn
            except (trio.BrokenResourceError, trio.ClosedResourceError, ConnectionError):
                pass  # reset rather than closed: gone all the same
            left = True
            done.cancel()

        with lone_exceptions():  # the fetch's own error (ArchiveReadError), not a group of one
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch, nursery.cancel_scope)
                await work
                nursery.cancel_scope.cancel()
        if left:
            raise trio.ClosedResourceError("the client left while an archived file was fetched for it")

    def _damaged(self, damage: StoredFileDamaged) -> DumpError:
        log.error("stored binlog file %s is damaged at %d, not served: %s", damage.file, damage.position, damage)
        return DumpError(str(damage))

    async def _send_run(self, reader: TailReader, outbound: OutboundStream, end: int) -> None:
        if outbound.fast_path_allowed() and not self.conn.semi_sync and await self._send_block(reader, outbound, end):
            return
        if outbound.gtid_start is not None and await self._pass_applied_groups(reader, outbound, end):
            return
        if outbound.excluded is not None and await self._pass_excluded_groups(reader, outbound, end):
            return
        start = reader.position
        # the same share of memory as the fast path's block (an event larger than that is read whole)
        events = reader.read_events(end, serve_block_size(len(self.context.registry.all_dumps)))
        await self._send_filtered(outbound.filter(events, start + sum(map(len, events))))
        self.state.position = reader.position

    async def _send_filtered(self, to_send: list[memoryview | bytes]) -> None:
        if to_send:
            if self.wants_acks:
                self.conn.send_events(to_send, [self._groups.ends_group(event[4], event) for event in to_send])
            else:
                self.conn.send_events(to_send)
            self._account(len(to_send), sum(map(len, to_send)), int.from_bytes(to_send[-1][0:4], "little"))
            await self.flush()
        else:
            # Nothing to send (a GTID start skipping what the replica has): every other client
            # and ingest must not wait for a walk to the start.
            await trio.lowlevel.checkpoint()

    async def _pass_applied_groups(self, reader: TailReader, outbound: OutboundStream, end: int) -> bool:
        """A MariaDB GTID dump before its start in every domain: jump over the spans of the index
        whose groups the replica has (sending their loose events), else pass over such groups
        by their headers; False when the event at the position needs the general path."""
        gtid_start = outbound.gtid_start
        assert gtid_start is not None
        plan = gtid_start.seek(reader.position, self.context.relay_log.history.indexed_spans(reader.file))
        if plan is not None and plan.target <= end:
            await self._jump(reader, outbound, gtid_start, plan)
            return True
        size = serve_block_size(len(self.context.registry.all_dumps))
        block = reader.mapped_block(end, size)
        if block is None:
            self._block_size = size
            buffer = self._buffer()
            block = buffer[: reader.read_block(buffer, end)]
        with block:
            used, skipped = gtid_start.skip_block(block, len(block), reader.checksummed)
        if not used:
            return False
        self._advance(reader, outbound, reader.position + used)
        self.state.position = reader.position
        outbound.count_skipped(skipped)
        self._passed("walked", used)
        await trio.lowlevel.checkpoint()
        return True

    async def _pass_excluded_groups(self, reader: TailReader, outbound: OutboundStream, end: int) -> bool:
        """A MySQL GTID dump: jump over the spans of the index whose groups the replica has; a
        heartbeat moves its position past them, as after groups left out one by one."""
        excluded = outbound.excluded
        assert excluded is not None
        spans = self.context.relay_log.history.indexed_spans(reader.file)
        target = excluded_until(excluded.replica_has, reader.position, spans)
        if target is None or target > end:
            return False
        jumped = spans[span_holding(reader.position, spans):]
        already = count_gtid_events(reader.relay_log.path(reader.file), jumped[0].start, reader.position)
        outbound.count_skipped(sum(span.groups for span in jumped if span.end <= target) - already)
        self._passed("index", target - reader.position)
        excluded.excluding = True
        self._advance(reader, outbound, target)
        self.state.position = target
        await self._send_filtered([outbound.heartbeat(target)])
        return True

    async def _jump(self, reader: TailReader, outbound: OutboundStream, gtid_start: GtidStart, plan: SeekPlan) -> None:
        """Follow ``plan``: its loose events go out as the walk would send them, then the dump
        continues at its target with the state the walk would have left."""
        already = count_gtid_events(reader.relay_log.path(reader.file), plan.spans[0].start, plan.position)
        gtid_start.before_loose_events()
        for at in plan.loose:
            self._advance(reader, outbound, at)
            events = reader.read_events(at + reader.event_length_at(at))
            await self._send_filtered(outbound.filter(events, reader.position))
        gtid_start.jumped(plan)
        outbound.count_skipped(sum(span.groups for span in plan.spans) - already)
        self._passed("index", plan.target - plan.position)
        self._advance(reader, outbound, plan.target)
        self.state.position = reader.position
        await trio.lowlevel.checkpoint()

    async def _send_block(self, reader: TailReader, outbound: OutboundStream, end: int) -> bool:
        """Read a block into the dump's own buffer and frame it in one pass; False if the event
        at the position does not fit in a block (the general path takes it)."""
        # Start small and double per block: replicas reconnecting together (after a restart)
        # start their dumps one by one, each seeing only those before it, and all their first
        # blocks would be big at once.
        share = serve_block_size(len(self.context.registry.all_dumps))
        self._block_size = min(share, 2 * self._block_size) if self._block_size else MIN_SERVE_BLOCK
        block = reader.mapped_block(end, self._block_size)
        if block is None:  # the file being written: read into the dump's own buffer
            buffer = self._buffer()
            block = buffer[: reader.read_block(buffer, end)]
        with block:
            run = frame_block(block, len(block), self.conn.sequence_id, outbound.options.replica_server_id,
                              verify_crc=reader.checksummed, leave_out=outbound.left_out_types(),
                              out=self._framed_buffer())
            last_timestamp = int.from_bytes(block[run.last_event : run.last_event + 4], "little")
        if not run.used:
            reader.hand_back()  # the event's first folio, mapped whole by the look at its header
            return await self._stream_large_event(reader, outbound, end)
        self._advance(reader, outbound, reader.position + run.used)
        if not run.events:  # only events this replica does not get
            return True
        self.conn.send_framed(run.data, run.events)
        self._account(run.events, run.used, last_timestamp)
        await self.flush()
        self.state.position = reader.position
        return True

    async def _stream_large_event(self, reader: TailReader, outbound: OutboundStream, end: int) -> bool:
        """An event larger than the block (sysbench's bulk INSERTs log 512 KiB annotations) sent
        through the block piece by piece instead of read whole and framed into a copy: 100 dumps
        crossing such events together would otherwise hold 1-2 MiB each.  False (the general path)
        for what the framer would refuse: 16 MB and more, the replica's own group start, a bad CRC32."""
        block = self._buffer()
        if reader.read_block(block[: ev.HEADER_LEN], end) < ev.HEADER_LEN:
            return False
        header = bytes(block[: ev.HEADER_LEN])
        length = int.from_bytes(header[9:13], "little")
        start = reader.position
        if (length <= len(block) or length + 1 >= 0xFFFFFF or start + length > end
                or outbound.left_out_types()[header[4]]):
            return False
        replica = outbound.options.replica_server_id
        if replica is not None and header[4] in _GROUP_STARTS and int.from_bytes(header[5:9], "little") == replica:
            return False
        if reader.checksummed:  # checked before any byte leaves: a damaged event is never sent
            crc = 0
            for offset in range(start, start + length, len(block)):
                crc = ev.crc32(block[: reader.read_block_at(block, offset, start + length)], crc)
            if crc != ev.CRC32_RESIDUE:
                return False
        self.conn.start_event(length)
        for offset in range(start, start + length, len(block)):
            size = reader.read_block_at(block, offset, start + length)
            self.conn.send_event_part(bytes(block[:size]))
            await self.flush()
        self._advance(reader, outbound, start + length)
        self._account(1, length, int.from_bytes(header[0:4], "little"))
        self.state.position = reader.position
        return True

    @staticmethod
    def _advance(reader: TailReader, outbound: OutboundStream, to: int | None = None) -> None:
        """The one place the dump's read position moves: ``reader`` to ``to`` (when given), and
        the position a heartbeat names (``outbound.position``) with it."""
        if to is not None:
            reader.advance(to)
        outbound.position = reader.position

    def _passed(self, how: str, size: int) -> None:
        passed = self.context.registry.gtid_start_passed
        passed[how] = passed.get(how, 0) + size

    def _buffer(self) -> memoryview:
        """A read buffer of the current block size (a mapped file needs none), shared by the dumps
        (``Registry.read_buffer``): fill it and use it before the next await."""
        return self.context.registry.read_buffer(self._block_size)

    def _framed_buffer(self) -> bytearray:
        """Where a block's packets are framed: the dump's own, reused once the block before was
        sent (``flush`` returns when the stream has taken every byte)."""
        capacity = framed_capacity(self._block_size)
        if self._framed is None or len(self._framed) != capacity:
            self._framed = bytearray(capacity)
        return self._framed

    def _account(self, events: int, size: int, last_timestamp: int) -> None:
        registry = self.context.registry
        registry.events_sent += events
        registry.bytes_sent += size
        self.state.last_event_timestamp = last_timestamp

    async def _wait_for_more(self, seen: tuple[str, int] | None, outbound: OutboundStream) -> None:
        """Until the next commit; a heartbeat for each quiet period the client asked for."""
        period = self.request.heartbeat_period
        if period is None:
            await self.context.relay_log.wait_for_commit(seen)
            return
        with trio.move_on_after(period):
            await self.context.relay_log.wait_for_commit(seen)
            return
        self.conn.send_events([outbound.heartbeat()])
        await self.flush()


def serve_block_size(dumps: int) -> int:
    """A dump's read block when ``dumps`` run at once: a power of two, so it changes only when the
    number of dumps doubles or halves."""
    share = SERVE_BLOCK_BUDGET // max(1, dumps)
    return max(MIN_SERVE_BLOCK, min(BLOCK_SIZE, 1 << (share.bit_length() - 1)))


def _describe_start(request: DumpRequest, start: GtidStart | ExcludedGroups | None) -> str:
    if isinstance(start, ExcludedGroups):
        return f" (GTID set {str(start.replica_has).replace(chr(10), '') or 'empty'})"
    if isinstance(start, GtidStart):
        return f" (GTID position {request.variables.get('slave_connect_state')})"
    return ""


def same_id_message(server_id: int) -> str:
    return (f"A slave with the same server_id {server_id} as this binlog relay has connected; give the replica "
            "a server_id different from the relay's")


async def serve_dump(context: SessionContext, request: DumpRequest, conn: proto.ServerConnection,
                     flush: Callable[[], Awaitable[None]], peer: str,
                     receive: Callable[[], Awaitable[bytes | bytearray]] | None = None) -> None:
    """Run one dump to its end; a refusal becomes the ERR packet a primary would send.
    ``receive``: the client's bytes, for the ACKs of a semi-sync replica."""
    registry = context.registry
    state = DumpState(request.server_id, peer, trio.CancelScope())
    dump = Dump(context, request, conn, flush, state, receive)
    reader = None
    try:
        if request.server_id == context.relay_server_id:
            raise DumpError(same_id_message(request.server_id))
        reader, start = await dump.planned()
        conn.semi_sync = state.semi_sync = request.semi_sync
        state.file, state.position = reader.file, reader.position  # what the replica book records at once
        registry.start_dump(state)
        log.info("downstream %s: dump for server_id %d from %s:%d%s", peer, request.server_id,
                 reader.file or "(first)", reader.position,
                 _describe_start(request, start))
        with state.cancel_scope:
            options = request.options(context.relay_server_id, context.ignore_server_ids)
            outbound = OutboundStream(options, skipped=registry.groups_filtered)
            if isinstance(start, GtidStart):
                outbound.gtid_start = start
            elif isinstance(start, ExcludedGroups):
                outbound.excluded = start
                outbound.clear_first_created = bool(start.replica_has)
            await dump.run(reader, outbound)
        if state.cancel_scope.cancelled_caught:
            log.info("downstream %s: dump of server_id %d ended: the same server_id connected again",
                     peer, request.server_id)
    except Refusal as refusal:  # the dump's own (DumpError), the reader's, the GTID planners'
        log.warning("downstream %s: dump refused: %s", peer, refusal)
        conn.send_dump_error(getattr(refusal, "code", ER_MASTER_FATAL_ERROR_READING_BINLOG), str(refusal))
        await flush()
    finally:
        registry.end_dump(state)
        if reader is not None:
            reader.close()
