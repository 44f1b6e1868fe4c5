"""A fault-injecting TCP proxy on loopback, written with trio and run in a thread of its own.

It forwards both ways unchanged until the test arms a fault; the fault fires once the server side
has sent ``after`` more bytes through it:
- cut: both connections closed (a FIN each way), as a crashed peer or a cut cable looks;
- reset: both aborted with an RST;
- stall: nothing forwarded for ``seconds``, then everything goes on;
- trickle: the next ``count`` bytes forwarded one at a time, ``byte_delay`` seconds apart.

``connect_times`` and ``fire_times`` (time.monotonic()) let a test measure how long a peer took to
come back after a fault.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass

import trio

FAULTS = ("cut", "reset", "stall", "trickle")


@dataclass
class Fault:
    kind: str
    after: int  # bytes from the server side before it fires
    seconds: float = 2.0  # stall
    count: int = 2000  # trickle
    byte_delay: float = 0.0005  # trickle


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.fired: dict[str, int] = dict.fromkeys(FAULTS, 0)
        self.connections = 0
        self.connect_times: list[float] = []
        self.fire_times: list[tuple[str, float]] = []
        self._armed: Fault | None = None
        self._lock = threading.Lock()
        self._started = threading.Event()
        self._stop: trio.CancelScope | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)
        self._thread.start()
        self._started.wait(10)

    def arm(self, fault: Fault) -> None:
        with self._lock:
            self._armed = fault

    def armed(self) -> bool:
        with self._lock:
            return self._armed is not None

    def close(self) -> None:
        if self._token is not None and self._stop is not None:
            try:
                trio.from_thread.run_sync(self._stop.cancel, trio_token=self._token)
            except trio.RunFinishedError:
                pass
        self._thread.join(10)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        with trio.CancelScope() as self._stop:
            self._started.set()
            await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, client: trio.SocketStream) -> None:
        try:
            server = await trio.open_tcp_stream("127.0.0.1", self.target_port)
        except OSError:
            await client.aclose()
            return
        self.connections += 1
        self.connect_times.append(time.monotonic())
        async with client, server, trio.open_nursery() as nursery:
            nursery.start_soon(self._forward, client, server, nursery.cancel_scope, False)
            nursery.start_soon(self._forward, server, client, nursery.cancel_scope, True)

    async def _forward(self, source: trio.SocketStream, sink: trio.SocketStream, done: trio.CancelScope,
                       from_server: bool) -> None:
        try:
            while data := await source.receive_some(65536):
                if from_server:
                    data = await self._maybe_fire(data, source, sink, done)
                    if data is None:
                        return
                await sink.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        done.cancel()

    async def _maybe_fire(self, data: bytes, source: trio.SocketStream, sink: trio.SocketStream,
                          done: trio.CancelScope) -> bytes | None:
        with self._lock:
            fault = self._armed
            if fault is None:
                return data
            if fault.after >= len(data):
                fault.after -= len(data)
                return data
            # counted before the fault shows as disarmed: a test reads them as soon as it does
            self.fired[fault.kind] += 1
            self.fire_times.append((fault.kind, time.monotonic()))
            self._armed = None
        head, rest = data[:fault.after], data[fault.after:]
        await sink.send_all(head)
        if fault.kind in ("cut", "reset"):
            if fault.kind == "reset":
                for stream in (source, sink):  # SO_LINGER 0: close() sends an RST
                    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            done.cancel()
            return None
        if fault.kind == "stall":
            await trio.sleep(fault.seconds)
            return rest
        for i in range(min(fault.count, len(rest))):  # trickle
            await sink.send_all(rest[i:i + 1])
            await trio.sleep(fault.byte_delay)
        return rest[fault.count:]
