"""The relay's own sans-IO client (relay.protocol.client.ClientConnection) on a blocking socket.

For the synchronous harness: the launcher's readiness probe and SQL, the benchmarks' raw dump
clients, and the tests' clients for dumps a real replica cannot be made to send.  Trio code
uses ``relay.ingest.connection.connect`` instead.

    with BlockingClient(port, "repl", "replpass") as client:
        client.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        client.start_dump("mysql-bin.000001", 4, server_id=77)
        packets = client.next_dump_packets()
"""

from __future__ import annotations

import socket

from ..protocol.client import NEED_DATA, ClientConnection, Connected
from ..protocol.packets import ProtocolError
from ..protocol.resultset import ResultSet
from .ports import LOOPBACK

Row = tuple[str | None, ...]
RECEIVE_SIZE = 1 << 16


class BlockingClient:
    """One logged-in connection (the login happens in the constructor).

    ``query`` returns the ResultSet or OkPacket of a statement and raises ServerError for an ERR;
    ``start_dump`` sends COM_BINLOG_DUMP, after which ``next_dump_packets`` reads the stream.
    ``sock`` and ``conn`` are there for callers that drive the bytes themselves."""

    def __init__(self, port: int, user: str, password: str, *, host: str = LOOPBACK, timeout: float = 10.0,
                 rcvbuf: int | None = None) -> None:
        self.user = user
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if rcvbuf is not None:
                # Before connect, so that the window the server sees is small from the start.
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            self.sock.settimeout(timeout)
            self.sock.connect((host, port))
            self.conn = ClientConnection(user, password)
            self.next_event(Connected)
        except BaseException:
            self.sock.close()
            raise

    # --- the bytes

    def flush(self) -> None:
        """Send what the protocol queued (a handshake response, a command)."""
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def receive(self) -> None:
        data = self.sock.recv(RECEIVE_SIZE)
        if not data:
            raise ConnectionError("the server closed the connection")
        self.conn.receive_data(data)

    def next_event(self, expected: type = object) -> object:
        """The protocol's next event, reading as much as it needs; ProtocolError if not ``expected``."""
        while True:
            event = self.conn.next_event()
            self.flush()  # handling the last packet may have queued an answer
            if event is not NEED_DATA:
                break
            self.receive()
        if not isinstance(event, expected):
            raise ProtocolError(f"expected {expected.__name__}, got {event!r}")
        return event

    # --- commands

    def query(self, sql: str) -> object:
        self.conn.query(sql)
        return self.next_event()

    def rows(self, sql: str) -> list[Row]:
        """The rows of one statement as text ([] for a statement without a result set)."""
        result = self.query(sql)
        return list(result.rows) if isinstance(result, ResultSet) else []

    def register_slave(self, server_id: int) -> object:
        """COM_REGISTER_SLAVE as a MariaDB replica sends it (report host, port and user)."""
        self.conn.register_slave(server_id, LOOPBACK, 3306, self.user, "")
        return self.next_event()

    def start_dump(self, file: str, position: int, server_id: int, flags: int = 0) -> None:
        self.conn.binlog_dump(file, position, server_id, flags)
        self.flush()

    def next_dump_packets(self) -> list[bytes]:
        """At least one complete packet of the dump stream (blocks up to the socket timeout)."""
        while True:
            packets = [bytes(packet) for packet in self.conn.read_binlog_packets()]
            if packets:
                return packets
            self.receive()

    # --- the end

    def quit(self) -> None:
        """COM_QUIT, then close: a polite goodbye keeps "Aborted connection" out of a server's error.log."""
        try:
            self.conn.quit()
            self.flush()
        except (ProtocolError, OSError):
            pass  # mid-dump or already closed: closing is all that is left
        finally:
            self.close()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
