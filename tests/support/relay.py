"""Waiting until a relay child (relay.sandbox.relayprocess.RelayProcess) mirrors its primary."""

from __future__ import annotations

from relay.sandbox.compare import mirror_differences
from relay.sandbox.mariadb import LocalMariaDB
from relay.sandbox.polling import wait_for
from relay.sandbox.relayprocess import RelayProcess


def wait_for_mirror(primary: LocalMariaDB, relay: RelayProcess, timeout: float = 60.0) -> None:
    """Until the relay's data_dir is a byte copy of the primary's binlogs (relay.sandbox.compare);
    fails at once if the relay exits, and names the differences left at the deadline."""
    last: list[str] = []

    def mirrored() -> bool:
        nonlocal last
        relay.check_alive()
        last = mirror_differences(primary, relay.data_dir)
        return not last

    try:
        wait_for(mirrored, timeout, "relay did not become a mirror of the primary")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {last}\n{relay.log_tail()}") from None
