"""Loopback ports for throw-away servers."""

from __future__ import annotations

import random
import socket
import threading

LOOPBACK = "127.0.0.1"


class _PortRange:
    """Ports handed out in turn from [first, last], from a random start, each one free when handed
    out; a port comes round again only once every other one has."""

    def __init__(self, first: int, last: int) -> None:
        if not 1024 <= first <= last <= 65535:
            raise ValueError(f"port range {first}-{last}: want 1024 <= first <= last <= 65535")
        self.first, self.size = first, last - first + 1
        self._turn = random.randrange(self.size)
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            for _ in range(self.size):
                port = self.first + self._turn
                self._turn = (self._turn + 1) % self.size
                if _bindable(port):
                    return port
        raise OSError(f"no free loopback port in {self.first}-{self.first + self.size - 1}")


_range: _PortRange | None = None


def use_port_range(first: int, last: int) -> None:
    """Take free_port's ports from [first, last] from now on, instead of the kernel's pick.  Test
    processes running side by side each take a range of their own, so they never race for the same
    port between picking it and the server's bind; a range below the kernel's ephemeral ports never
    meets a client socket's port either."""
    global _range
    _range = _PortRange(first, last)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel picks it, unless a range was
    set with use_port_range)."""
    if _range is not None:
        return _range.take()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def port_in_use(port: int, host: str = LOOPBACK) -> bool:
    """Whether something accepts connections on host:port now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.5)
        return probe.connect_ex((host, port)) == 0
