"""Every error the relay defines has one of the kinds in relay/errors.py, so callers decide by kind
(retry, stop, refuse one request) instead of listing classes one by one."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

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
    from relay.protocol.client import AuthenticationError
    from relay.protocol.packets import ProtocolError, ServerError
    from relay.replication.stream import StreamError, UpstreamEnded
    from relay.storage.files import DataDirError
    from relay.upstream import _RETRYABLE, FatalIngestError

    for retried in (UpstreamEnded("EOF"), AuthenticationError("refused"), ProtocolError("bad"),
                    ServerError(1236, "HY000", "gone")):
        assert isinstance(retried, _RETRYABLE)
    for fatal in (StreamError("x"), DataDirError("x"), FatalIngestError("x")):
        assert isinstance(fatal, errors.FatalError) and not isinstance(fatal, _RETRYABLE)
