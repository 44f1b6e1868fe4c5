"""free_port's ranges (relay/sandbox/ports.py): parallel test workers must never be handed the
same port, and a port a server holds must never be handed out."""

from __future__ import annotations

import socket

import pytest

from relay.sandbox.ports import LOOPBACK, _PortRange


def _free_block(size: int) -> int:
    """The first of ``size`` consecutive ports that are free now, below the ephemeral range."""
    for first in range(20000, 32000, size):
        if all(_PortRange(port, port).take() == port for port in range(first, first + size)):
            return first
    raise AssertionError("no block of free ports")


def test_a_range_hands_out_each_port_once_before_any_comes_round_again():
    first = _free_block(8)
    ports = _PortRange(first, first + 7)
    handed = [ports.take() for _ in range(16)]
    assert sorted(handed[:8]) == list(range(first, first + 8))
    assert handed[8:] == handed[:8]


def test_a_port_in_use_is_passed_over_and_a_full_range_is_an_error():
    first = _free_block(2)
    with socket.create_server((LOOPBACK, first)):
        ports = _PortRange(first, first + 1)
        assert {ports.take() for _ in range(4)} == {first + 1}
        with socket.create_server((LOOPBACK, first + 1)), pytest.raises(OSError, match="no free loopback port"):
            ports.take()


def test_a_range_outside_the_unprivileged_ports_is_refused():
    with pytest.raises(ValueError):
        _PortRange(80, 90)
    with pytest.raises(ValueError):
        _PortRange(3000, 2000)
