"""relay/httpserver.py over a real loopback socket, the bounded histograms of relay/stats.py, and
the unread-bytes count the upstream lag relies on (a real TCP connection, no mocks)."""

from __future__ import annotations

import trio
import trio.testing

from relay.httpserver import CONTENT_TYPE, HttpServer, Readiness
from relay.ingest.connection import PrimaryConnection
from relay.ingest.status import UpstreamStatus
from relay.protocol.client import ClientConnection
from relay.stats import Histogram
from relay.storage.relaylog import RelayLog


async def _get(port: int, path: str) -> tuple[str, str, str]:
    """(status line, content type, body) of one GET over a fresh connection."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
    head, body = data.decode().split("\r\n\r\n", 1)
    lines = head.split("\r\n")
    content_type = next(line.split(": ", 1)[1] for line in lines if line.startswith("Content-Type"))
    return lines[0], content_type, body


async def test_the_endpoint_routes_metrics_health_and_readiness(tmp_path, nursery):
    relay_log = RelayLog(tmp_path)
    relay_log.open()
    status = UpstreamStatus()  # not connected yet, nothing stored
    readiness = Readiness(status, relay_log, unready_after=60)
    server = HttpServer(lambda: b"binlog_relay_up 1\n", readiness.check)
    port = await nursery.start(server.serve, "127.0.0.1", 0)
    try:
        assert await _get(port, "/metrics") == ("HTTP/1.1 200 OK", CONTENT_TYPE, "binlog_relay_up 1\n")
        assert await _get(port, "/healthz") == ("HTTP/1.1 200 OK", "text/plain", "ok\n")
        # Nothing to serve and no primary: not ready, and the body says why.
        assert await _get(port, "/readyz") == ("HTTP/1.1 503 Service Unavailable", "text/plain",
                                               "not connected to the primary and nothing stored to serve yet\n")
        status.connected, status.failing_since = True, None
        assert await _get(port, "/readyz") == ("HTTP/1.1 200 OK", "text/plain", "ready\n")
        # Failing past the bound: 503 with the error, whatever is stored.
        status.connected, status.failing_since, status.last_error = False, trio.current_time() - 1e9, "refused"
        readiness.unready_after = 0
        line, _, body = await _get(port, "/readyz")
        assert line == "HTTP/1.1 503 Service Unavailable" and body.startswith("ingest has been failing for"), body
        assert body.rstrip().endswith(": refused"), body
        assert (await _get(port, "/nope"))[0] == "HTTP/1.1 404 Not Found"
        # Stopped by STOP SLAVE: on purpose, not failing; ready while something is stored to serve.
        status.stopped = True
        assert await _get(port, "/readyz") == ("HTTP/1.1 503 Service Unavailable", "text/plain",
                                               "ingest stopped (STOP SLAVE) and nothing stored to serve yet\n")
    finally:
        relay_log.close()


def test_histogram_buckets_are_upper_bounds_and_memory_is_fixed():
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 7.0):  # a value on a bound counts in that bucket (le)
        histogram.observe(value)
    assert histogram.cumulative() == [("0.1", 2), ("1.0", 4), ("+Inf", 5)]
    assert (histogram.count, round(histogram.sum, 9)) == (5, 8.65)
    size = len(histogram.counts)
    for _ in range(10_000):
        histogram.observe(0.2)
    assert len(histogram.counts) == size  # O(1) memory: nothing kept per observation


async def test_unread_bytes_counts_what_waits_in_the_receive_queue():
    # The upstream lag is 0 only when nothing the primary sent waits unread: this is that count.
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        accepted: list[trio.SocketStream] = []

        async def accept() -> None:
            accepted.append(await listeners[0].accept())

        nursery.start_soon(accept)
        relay_side = await trio.open_tcp_stream("127.0.0.1", port)
        while not accepted:
            await trio.testing.wait_all_tasks_blocked()
        primary_side = accepted[0]
        conn = PrimaryConnection(relay_side, ClientConnection("repl", "x"))
        assert conn.unread_bytes() == 0
        await primary_side.send_all(b"x" * 100_000)
        with trio.fail_after(10):
            while conn.unread_bytes() < 100_000:  # loopback delivery is quick but not instant
                await trio.sleep(0.01)
        assert conn.unread_bytes() == 100_000
        received = 0
        while received < 100_000:
            received += len(await relay_side.receive_some(65536))
        assert conn.unread_bytes() == 0
        await relay_side.aclose()
        assert conn.unread_bytes() == 0  # a closed connection has nothing waiting
        await primary_side.aclose()
        await listeners[0].aclose()
