"""Every error the relay defines has one of the kinds in relay/errors.py, so callers decide by kind
(retry, stop, refuse one request) instead of listing classes one by one."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import relay
from relay import errors

KINDS = (errors.FatalError, errors.RetryableError, errors.Refusal, errors.InputError)
# Not the relay's: the sandbox (the demo and the throw-away servers of the tests and benchmarks) reports its
# own failures.
OUTSIDE = ("relay.sandbox",)


def _relay_exceptions() -> list[type[BaseException]]:
    found = []
    for module_info in pkgutil.walk_packages(relay.__path__, "relay."):
        if module_info.name.startswith(OUTSIDE):
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == module.__name__
                    and not name.startswith("_")):
                found.append(value)
    return found


def test_every_relay_error_has_a_kind():
    exceptions = _relay_exceptions()
    assert len(exceptions) > 20  # the walk found the modules
    without_kind = [f"{e.__module__}.{e.__qualname__}" for e in exceptions
                    if e not in (errors.RelayError, *KINDS) and not issubclass(e, KINDS)]
    assert not without_kind, without_kind


def test_kinds_are_distinct():
    for kind in KINDS:
        assert issubclass(kind, errors.RelayError)
        assert not any(issubclass(kind, other) for other in KINDS if other is not kind)


def test_what_ingest_retries_and_what_stops_it():
    from relay.candidates import CandidateUnusable
    from relay.ingest.errors import FATAL, RETRYABLE, FatalIngestError, NoCandidate
    from relay.protocol.client import AuthenticationError
    from relay.protocol.packets import PacketTooLarge, ProtocolError, ServerError
    from relay.replication.stream import StreamError, UpstreamEnded
    from relay.storage.files import DataDirError

    for retried in (UpstreamEnded("EOF"), AuthenticationError("refused"), ProtocolError("bad"),
                    ServerError(1236, "HY000", "gone"), NoCandidate("none"), ConnectionError("reset")):
        assert isinstance(retried, RETRYABLE) and not isinstance(retried, FATAL)
    for fatal in (StreamError("x"), DataDirError("x"), FatalIngestError("x"), CandidateUnusable("x")):
        assert isinstance(fatal, FATAL) and not isinstance(fatal, RETRYABLE)
    # The sans-IO layers do not decide: their errors about bytes that do not fit are of the neutral kind,
    # and ingest (above) or a downstream session decides what they mean.
    for neutral in (ProtocolError("bad"), PacketTooLarge(1 << 30, 1 << 24), StreamError("x")):
        assert isinstance(neutral, errors.InputError)
        assert not isinstance(neutral, (errors.FatalError, errors.RetryableError))


async def test_a_stream_error_stops_ingest_as_a_fatal_error(tmp_path, monkeypatch, caplog):
    """What the primary sent cannot be stored: ingest logs why and stops with a FatalError of the same
    message, which `binlog-relay run` logs before it exits 1."""
    from relay.ingest.errors import FatalIngestError
    from relay.ingest.settings import UpstreamSettings
    from relay.replication.stream import StreamError
    from relay.storage.relaylog import RelayLog
    from relay.upstream import Upstream

    relay_log = RelayLog(tmp_path)
    relay_log.open()
    try:
        upstream = Upstream(UpstreamSettings("127.0.0.1", 1, "repl", "x", relay_server_id=9), relay_log)

        async def replicate_once() -> None:
            raise StreamError("event at mysql-bin.000001:4 failed its CRC32 check")

        monkeypatch.setattr(upstream, "_replicate_once", replicate_once)
        with pytest.raises(FatalIngestError, match="failed its CRC32 check") as stopped:
            await upstream._replicate_for_ever()
        assert isinstance(stopped.value.__cause__, StreamError)
        assert upstream.status.last_error == "event at mysql-bin.000001:4 failed its CRC32 check"
        assert "upstream: ingest stopped: event at mysql-bin.000001:4 failed its CRC32 check" in caplog.text
    finally:
        relay_log.close()
