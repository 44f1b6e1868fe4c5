"""free_port's ranges (relay/sandbox/ports.py): parallel test workers must never be handed the
same port, and a port a server holds must never be handed out."""

from __future__ import annotations

import socket

import pytest

from relay.sandbox.ports import LOOPBACK, _bindable, _PortRange, free_port
from tests.support.ports import TEST_PORTS, worker_slice


def _free_block(size: int) -> int:
    """The first of ``size`` consecutive ports that are free now, below the ephemeral range."""
    for first in range(20000, 32000, size):
        if all(_bindable(port) for port in range(first, first + size)):
            return first
    raise AssertionError("no block of free ports")


def test_a_test_process_takes_its_ports_from_its_own_range():
    """tests/conftest.py gives each worker a slice of TEST_PORTS, and free_port keeps to it."""
    ports = {free_port() for _ in range(20)}
    assert len(ports) == 20 and all(TEST_PORTS[0] <= port <= TEST_PORTS[1] for port in ports)


def test_the_workers_slices_do_not_meet_and_stay_below_the_ephemeral_ports():
    slices = [worker_slice(f"gw{i}", 3) for i in range(3)]
    assert all(first <= last < next_first for (first, last), (next_first, _) in zip(slices, slices[1:]))
    assert slices[0][0] >= TEST_PORTS[0] and slices[-1][1] <= TEST_PORTS[1] < 32768


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
