"""Who is connected and who registered: what SHOW SLAVE HOSTS and the metrics read."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import trio


@dataclass
class Replica:
    server_id: int
    host: str
    port: int
    user: str
    uuid: str = ""  # @replica_uuid / @slave_uuid, which MySQL replicas set before registering
    registered_at: float = field(default_factory=time.time)


@dataclass(eq=False)  # identity, so it can live in a set
class DumpState:
    """One running dump: where it is, and how to end it."""

    server_id: int
    peer: str
    cancel_scope: trio.CancelScope
    file: str = ""
    position: int = 0
    last_event_timestamp: int = 0
    acked: tuple[str, int] | None = None  # a semi-sync replica's last ACK: (file, position)
    semi_sync: bool = False  # the replica asked for semi-sync (Rpl_semi_sync_master_clients)


class Registry:
    def __init__(self) -> None:
        self.replicas: dict[int, Replica] = {}
        self.dumps: dict[int, DumpState] = {}  # by replica server_id (0: anonymous, not here)
        self.all_dumps: set[DumpState] = set()  # anonymous ones too: what retention must spare
        self.sessions_by_state: dict[str, int] = {}
        # cumulative counters, read by the metrics collector
        self.events_sent = 0
        self.bytes_sent = 0
        self.groups_filtered: dict[str, int] = {}
        self.gtid_start_passed: dict[str, int] = {}  # bytes GTID dumps passed before their start, by how
        self.auth_failures = 0
        self.protocol_errors: dict[str, int] = {}
        # SHOW GLOBAL STATUS: sessions opened and the most at once, bytes on the wire both ways,
        # statements, and those of them a Com_ counter counts (downstream/globalstatus.py)
        self.connections = 0
        self.max_used_connections = 0
        self.network_bytes_sent = 0
        self.network_bytes_received = 0
        self.questions = 0
        self.commands: dict[str, int] = {}
        self._ack_event = trio.Event()
        self._new_dump = trio.Event()
        self._read_buffer = memoryview(bytearray(0))

    def read_buffer(self, size: int) -> memoryview:
        """A buffer of ``size`` bytes for a dump's read, one for all the dumps: they run in one
        thread and none holds it across an await (what it read is framed into the dump's own
        buffer, or copied, before the dump sends).  Per dump, 100 dumps held 100 of them."""
        if len(self._read_buffer) < size:
            self._read_buffer = memoryview(bytearray(size))
        return self._read_buffer[:size]

    def note_ack(self, dump: DumpState, file: str, position: int) -> None:
        dump.acked = (file, position)
        self._ack_event.set()
        self._ack_event = trio.Event()

    def acks_at_or_past(self, reached: Callable[[tuple[str, int]], bool]) -> int:
        """How many connected semi-sync replicas acknowledged a position ``reached`` accepts."""
        return sum(1 for dump in self.all_dumps if dump.acked is not None and reached(dump.acked))

    async def wait_for_ack(self) -> None:
        await self._ack_event.wait()

    def protocol_error(self, kind: str) -> None:
        self.protocol_errors[kind] = self.protocol_errors.get(kind, 0) + 1

    def register(self, replica: Replica) -> None:
        self.replicas[replica.server_id] = replica

    def start_dump(self, dump: DumpState) -> None:
        """A primary ends the older dump of a replica that connects again with the same server_id
        (server_id 0, a tool's one-off dump, is never a replica: those all run side by side)."""
        self.all_dumps.add(dump)
        if dump.server_id == 0:
            return
        older = self.dumps.get(dump.server_id)
        if older is not None:
            older.cancel_scope.cancel()
        self.dumps[dump.server_id] = dump
        self._new_dump.set()
        self._new_dump = trio.Event()

    async def wait_for_new_dump(self) -> None:
        """Until a replica (server_id not 0) starts a dump."""
        await self._new_dump.wait()

    def end_dump(self, dump: DumpState) -> None:
        self.all_dumps.discard(dump)
        if self.dumps.get(dump.server_id) is dump:
            del self.dumps[dump.server_id]
            self.replicas.pop(dump.server_id, None)

    def files_in_use(self) -> set[str]:
        return {dump.file for dump in self.all_dumps if dump.file}

    def slave_hosts(self, relay_server_id: int) -> list[tuple[int, str, int, int, str]]:
        return [(r.server_id, r.host, r.port, relay_server_id, r.uuid) for r in self.replicas.values()
                if r.server_id in self.dumps]

    def session_state(self, old: str | None, new: str | None) -> None:
        for state, delta in ((old, -1), (new, 1)):
            if state is not None:
                self.sessions_by_state[state] = self.sessions_by_state.get(state, 0) + delta
        if old is None:  # a new session
            self.connections += 1
            self.max_used_connections = max(self.max_used_connections, self.sessions())

    def sessions(self) -> int:
        """Sessions open now, logging in or logged in."""
        return sum(self.sessions_by_state.values())

    def count_command(self, command: str | None) -> None:
        if command is not None:
            self.commands[command] = self.commands.get(command, 0) + 1
