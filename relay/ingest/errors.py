"""What ingest retries after a back-off and what stops it: the kinds of relay/errors.py, decided here.

The sans-IO layers report bytes that do not fit with errors of no fixed kind (``InputError``):
what they mean depends on who reads the bytes and why.  For ingest, a packet of the primary that
breaks the protocol (``ProtocolError``) is the peer's or the network's fault, and the next
connection starts afresh: retried.  A dump stream the relay must not store (``StreamError``: a
failed CRC32, events that do not continue the stored history) stops ingest: an operator must act.
"""

from __future__ import annotations

import ssl

import trio

from ..errors import FatalError, RetryableError
from ..protocol.packets import ProtocolError, ServerError
from ..replication.stream import StreamError


class FatalIngestError(FatalError):
    """Ingest cannot go on without an operator (wrong primary, corrupt data, bad position)."""


class NoCandidate(RetryableError):
    """No candidate primary can be followed now (unreachable or refused): tried again later."""


RETRYABLE = (RetryableError, ProtocolError, OSError, trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError)
# What stops ingest; Upstream raises a StreamError on as a FatalIngestError of the same message.
FATAL = (FatalError, StreamError)


def describe(exc: BaseException) -> str:
    if isinstance(exc, trio.TooSlowError):
        return "timed out connecting"
    if isinstance(exc, trio.BrokenResourceError) and isinstance(exc.__cause__, ssl.SSLError):
        return f"TLS with the primary failed: {exc.__cause__}"
    return str(exc) or type(exc).__name__


# The client library's numbers a MariaDB replica shows as Last_IO_Errno for the same failures
# (errmsg.h): the primary unreachable, the connection lost, TLS failing, a malformed packet.
CR_CONN_HOST_ERROR = 2003
CR_SERVER_LOST = 2013
CR_SSL_CONNECTION_ERROR = 2026
CR_MALFORMED_PACKET = 2027


def error_number(exc: BaseException, connected: bool) -> int:
    """The Last_IO_Errno of a failure: the primary's own error number when it refused (1045 for a
    wrong password), else the client library's for what happened to the connection; ``connected``:
    whether the dump was running when it failed (lost) or still being set up (not reached)."""
    if isinstance(exc, ServerError):
        return exc.code
    if isinstance(exc, ssl.SSLError) or isinstance(exc.__cause__, ssl.SSLError):
        return CR_SSL_CONNECTION_ERROR
    if isinstance(exc, ProtocolError):
        return CR_MALFORMED_PACKET
    return CR_SERVER_LOST if connected else CR_CONN_HOST_ERROR
