"""run_trio: the entry points see the same exceptions on trio 0.22 (loose nurseries) and >= 0.25 (strict)."""

from __future__ import annotations

import pytest
import trio

from relay.trio_run import lone_exceptions, run_trio


async def _raise_in_nested_nurseries(exc: BaseException) -> None:
    async def fail() -> None:
        raise exc

    # strict, as every nursery is from trio 0.25 on: the test means the same on the trio CI runs
    async with trio.open_nursery(strict_exception_groups=True) as outer:
        async with trio.open_nursery(strict_exception_groups=True) as inner:
            inner.start_soon(fail)
            outer.start_soon(trio.sleep_forever)


async def _two_failures() -> None:
    async def fail(exc: Exception) -> None:
        raise exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(fail, ValueError("one"))
        nursery.start_soon(fail, OSError("two"))


async def _answer() -> int:
    await trio.sleep(0)
    return 42


def test_returns_the_result():
    assert run_trio(_answer) == 42


def test_lone_exception_leaves_every_nursery_unwrapped():
    with pytest.raises(OSError, match="Address already in use") as raised:
        run_trio(_raise_in_nested_nurseries, OSError(98, "Address already in use"))
    assert not isinstance(raised.value, BaseExceptionGroup)


def test_explicit_cause_is_kept():
    cause = ValueError("the server's error")
    try:
        raise RuntimeError("refused") from cause
    except RuntimeError as exc:
        error = exc
    with pytest.raises(RuntimeError) as raised:
        run_trio(_raise_in_nested_nurseries, error)
    assert raised.value.__cause__ is cause


def test_base_exceptions_are_unwrapped_too():
    # cli and demo catch KeyboardInterrupt / rely on SystemExit(0) from the SIGTERM handler
    with pytest.raises(KeyboardInterrupt):
        run_trio(_raise_in_nested_nurseries, KeyboardInterrupt())
    with pytest.raises(SystemExit):
        run_trio(_raise_in_nested_nurseries, SystemExit(0))


def test_several_exceptions_stay_a_group():
    with pytest.raises(BaseExceptionGroup) as raised:
        run_trio(_two_failures)
    leaves = sorted(str(exc) for exc in raised.value.exceptions)
    assert leaves == ["one", "two"]


async def _raise(exc: BaseException) -> None:
    raise exc


def test_a_retry_loop_inside_the_run_sees_a_nurserys_lone_exception_as_itself():
    """Upstream's semi-sync nursery and a dump's ACK reader sit inside code that decides by the
    exception's kind (retry a ConnectionError, stop on a fatal one): lone_exceptions unwraps it
    there, inside the run, before any group reaches that code."""

    async def once() -> str:
        try:
            with lone_exceptions():
                async with trio.open_nursery(strict_exception_groups=True) as nursery:
                    nursery.start_soon(_raise, ConnectionError("the primary closed the connection"))
        except ConnectionError as exc:
            return f"retried after: {exc}"
        return "not raised"

    assert trio.run(once) == "retried after: the primary closed the connection"
