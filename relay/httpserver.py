"""The relay's HTTP endpoint on the trio loop: /metrics (the exposition relay/metrics.py renders),
/healthz (the process is alive) and /readyz (the relay serves and its ingest is healthy or in
its back-off within a bound).

This module only routes requests and decides readiness; it computes no figures.  One request per
connection, answered and closed: Prometheus, kubelet probes and curl need nothing more.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import trio

from .ingest.status import UpstreamStatus
from .storage.relaylog import RelayLog
from .trio_run import open_listeners

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus text format 0.0.4
REQUEST_TIMEOUT = 10.0  # seconds a client may take to send its request head
MAX_REQUEST_HEAD = 16384  # a longer head is not a probe or a scrape: dropped

Response = tuple[str, str, bytes]  # status line, content type, body


class Readiness:
    """/readyz: ready means serving (data_dir writable, and something stored or the primary
    connected) and ingest working or failing for no longer than ``unready_after`` seconds, the
    reconnect back-off a relay is allowed before an orchestrator should stop sending it replicas.
    Ingest stopped by STOP SLAVE is not a failure: an operator (a failover manager repointing the
    relay) stopped it, and replicas are served what is stored; the body says it is stopped."""

    def __init__(self, upstream: UpstreamStatus, relay_log: RelayLog, unready_after: float = 60.0) -> None:
        self.upstream = upstream
        self.relay_log = relay_log
        self.unready_after = unready_after

    def check(self) -> tuple[bool, str]:
        """(ready, reason): the reason is the body of the answer, so a 503 says why."""
        if not os.access(self.relay_log.data_dir, os.W_OK):
            return False, f"data_dir {self.relay_log.data_dir} is not writable"
        status = self.upstream
        if status.stopped:  # by STOP SLAVE, on purpose: what is stored is served
            if not self.relay_log.files:
                return False, "ingest stopped (STOP SLAVE) and nothing stored to serve yet"
            return True, "ready; ingest stopped (STOP SLAVE): serving what is stored"
        if status.connected or status.failing_since is None:
            return True, "ready"
        failing = time.monotonic() - status.failing_since
        if failing > self.unready_after:
            return False, f"ingest has been failing for {failing:.0f}s: {status.last_error or 'not connected yet'}"
        if not self.relay_log.files:
            return False, "not connected to the primary and nothing stored to serve yet"
        return True, f"ready; reconnecting to the primary for {failing:.0f}s"


class HttpServer:
    """Serves ``render_metrics()`` on /metrics and ``readiness()`` on /readyz."""

    def __init__(self, render_metrics: Callable[[], bytes], readiness: Callable[[], tuple[bool, str]]) -> None:
        self.render_metrics = render_metrics
        self.readiness = readiness
        self.port: int | None = None

    async def serve(self, host: str, port: int,
                    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await open_listeners("metrics", host, port)
        self.port = listeners[0].socket.getsockname()[1]
        log.info("metrics on http://%s:%d/metrics", host, self.port)
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            with trio.move_on_after(REQUEST_TIMEOUT):
                request_line = await _read_request_line(stream)
                if request_line is None:
                    return
                status, content_type, body = self.route(request_line)
                head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode("ascii")
                await stream.send_all(head + body)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    def route(self, request_line: str) -> Response:
        """The answer to one request line (``GET /readyz HTTP/1.1``)."""
        parts = request_line.split(" ")
        if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", "text/plain", b"only GET\n"
        path = parts[1].split("?", 1)[0]
        if path == "/metrics":
            return "200 OK", CONTENT_TYPE, self.render_metrics()
        if path == "/healthz":
            return "200 OK", "text/plain", b"ok\n"
        if path == "/readyz":
            ready, reason = self.readiness()
            return ("200 OK" if ready else "503 Service Unavailable"), "text/plain", f"{reason}\n".encode()
        return "404 Not Found", "text/plain", b"not found\n"


async def _read_request_line(stream: trio.SocketStream) -> str | None:
    """The first line of the request head (the rest of the head is read and ignored)."""
    data = b""
    while b"\r\n\r\n" not in data and b"\n\n" not in data:
        chunk = await stream.receive_some(4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST_HEAD:
            return None
    line = data.split(b"\n", 1)[0].rstrip(b"\r")
    return line.decode("latin-1") if line else None
