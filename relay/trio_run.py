"""trio.run for the command line entry points, with the same exceptions on every trio the project allows."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import trio

T = TypeVar("T")


def run_trio(async_fn: Callable[..., Awaitable[T]], *args: object) -> T:
    """trio.run(async_fn, *args); an exception that ends the run on its own is raised as itself.

    Since trio 0.25 nurseries default to strict_exception_groups: whatever escapes one is wrapped in an
    ExceptionGroup, once per nursery it crosses (`binlog-relay run` nests three), where trio 0.22 let a
    lone exception through unchanged. The callers choose the exit code and the message by catching
    DataDirError, OSError, KeyboardInterrupt..., so a lone exception is taken out of its groups here.
    A group of several exceptions (genuinely concurrent failures) is raised unchanged.
    """
    with lone_exceptions():
        return trio.run(async_fn, *args)


@contextmanager
def lone_exceptions() -> Iterator[None]:
    """An ExceptionGroup of one exception (through nested groups) leaves as that exception; a
    group of several leaves unchanged.  Also for the nurseries inside a retry loop: the loop
    decides by the exception's kind (retry, stop), which a group wrapping it hides."""
    try:
        yield
    except BaseExceptionGroup as group:
        lone: BaseException = group
        while isinstance(lone, BaseExceptionGroup) and len(lone.exceptions) == 1:
            lone = lone.exceptions[0]
        if isinstance(lone, BaseExceptionGroup):
            raise
        # `from lone.__cause__` keeps its own cause and leaves the group out of the traceback.
        raise lone from lone.__cause__


# trio 0.23 renamed to_thread.run_sync's ``cancellable`` to ``abandon_on_cancel``.
_ABANDON = "abandon_on_cancel" if "abandon_on_cancel" in inspect.signature(trio.to_thread.run_sync).parameters \
    else "cancellable"


async def run_abandonable(sync_fn: Callable[..., T], *args: object) -> T:
    """trio.to_thread.run_sync(sync_fn, *args), given up when the calling task is cancelled: the
    thread runs on to its own end, and its result is lost (the caller tells it to stop)."""
    run_sync: Any = trio.to_thread.run_sync  # the keyword's name depends on the trio installed
    result: T = await run_sync(sync_fn, *args, **{_ABANDON: True})
    return result


async def open_listeners(setting: str, host: str, port: int) -> list[trio.SocketListener]:
    """trio's listeners on ``host``:``port``; a bind refused names the setting and the address
    ("Address already in use" does not say which of the relay's ports)."""
    try:
        return await trio.open_tcp_listeners(port, host=host)
    except OSError as err:
        raise OSError(err.errno, f"{err.strerror}: {setting}.host/{setting}.port {host}:{port}") from None
