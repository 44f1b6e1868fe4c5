"""The fault suite: short in the default test run, long with FAULTS_SCALE=long (scripts/faults.sh).

``fault_relay`` starts relays as ``relay_factory`` does (tests/support/replication.py) with a known
metrics port, and records each one: before it is stopped, its /metrics, /healthz and /readyz bodies
are saved next to its log, so tests/faults/test_secrets.py can search everything the suite's relays
said for the passwords they were given.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from relay.sandbox.ports import free_port
from relay.sandbox.relayprocess import RelayProcess
from tests.support.faults import ENDPOINTS_FILE, STARTED_RELAYS, endpoint_texts

SCALE = os.environ.get("FAULTS_SCALE", "short")
if SCALE not in ("short", "long"):
    raise pytest.UsageError(f"FAULTS_SCALE must be short or long, not {SCALE!r}")
LONG = SCALE == "long"

# How many faults of each class one run injects (RELIABILITY.md has the figures of both runs).
KILL9_CYCLES = 200 if LONG else 20
PROXY_FAULTS_EACH = 100 if LONG else 20  # per kind and leg
HOSTILE_CASES = 100_000 if LONG else 5_000
POWER_CUTS = 200 if LONG else 20  # per storage.sync policy



def passwords_of(config: dict[str, Any]) -> tuple[str, ...]:
    found = [config.get("upstream", {}).get("password")]
    found += [user.get("password") for user in config.get("users", [])]
    return tuple(p for p in found if p)


@pytest.fixture
def fault_relay(relay_factory: Any) -> Iterator[Any]:
    """make(name, upstream_port, **overrides) -> a started RelayProcess (relay_factory's), recorded."""
    mine: list[RelayProcess] = []

    def make(name: str, upstream_port: int, **overrides: Any) -> RelayProcess:
        overrides.setdefault("metrics", {"host": "127.0.0.1", "port": free_port()})
        relay = relay_factory(name, upstream_port, **overrides)
        mine.append(relay)
        STARTED_RELAYS.append((relay.work_dir, passwords_of(relay.config)))
        return relay

    yield make
    for relay in mine:  # relay_factory stops them after this
        if relay.alive():
            try:
                (relay.work_dir / ENDPOINTS_FILE).write_text(endpoint_texts(relay))
            except OSError:
                pass
