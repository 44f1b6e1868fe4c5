"""A TCP forwarder between the relay and a real primary that the test can cut.

It changes no byte: it only lets a test break the connection at a chosen moment
(e.g. after N bytes from the primary, which lands inside a large transaction)."""

from __future__ import annotations

import socket
import threading
import time


class CuttableProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.cut_after: int | None = None  # bytes from the primary, counted per connection
        self.frozen = threading.Event()  # while set, nothing is forwarded and nothing is closed
        self.rate: float | None = None  # bytes a second from the primary, per connection (a slow network)
        self.cuts = 0
        self.connections = 0
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:  # the primary is down (a test restarts it): the client sees a close
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, server))
                self.connections += 1
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_primary: bool) -> None:
        forwarded = 0
        try:
            while True:
                limit = self.cut_after if from_primary else None
                want = 1 << 16 if limit is None else max(1, min(1 << 16, limit - forwarded))
                data = source.recv(want)
                if not data:
                    break
                while self.frozen.is_set() and not self._closed:
                    self.frozen.wait(0.05)  # a silent network: bytes neither pass nor fail
                if not from_primary:
                    self._before_request()
                sink.sendall(data)
                forwarded += len(data)
                rate = self.rate if from_primary else None
                if rate:
                    time.sleep(len(data) / rate)  # the time these bytes take on a slow network
                if from_primary and self.cut_after is not None and forwarded >= self.cut_after:
                    self.cut_after = None
                    self.cuts += 1
                    break
        except OSError:
            pass
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _before_request(self) -> None:
        """Called with every piece a client sends, before it goes on (a subclass may hold it)."""

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for pair in self._pairs:
                for sock in pair:
                    try:
                        sock.close()
                    except OSError:
                        pass
