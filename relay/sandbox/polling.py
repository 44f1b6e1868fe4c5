"""Waiting for a condition with a deadline, for the synchronous harness (threads, no trio)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from .errors import WaitTimeout

T = TypeVar("T")

POLL_INTERVAL = 0.05


def wait_for(
    predicate: Callable[[], T],
    timeout: float = 30.0,
    message: str = "condition not met",
    *,
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll predicate every 50 ms until it returns a truthy value, and return that value.

    Raises WaitTimeout(message) at the deadline.  Exceptions listed in ``ignore`` count as
    "not yet" (e.g. a connection error while a server restarts); the last one is named in
    the message.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except ignore as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise WaitTimeout(_timeout_message(message, timeout, last_error))
        time.sleep(POLL_INTERVAL)


def _timeout_message(message: str, timeout: float, last_error: BaseException | None) -> str:
    suffix = f"; last error: {last_error!r}" if last_error is not None else ""
    return f"{message} (not within {timeout:g} s{suffix})"
