"""The relay's error kinds.  Every error it raises on purpose derives from ``RelayError`` and carries
a message meant for a DBA; what a caller does with it depends only on its kind:

- ``FatalError``: retrying cannot help; an operator must act (configuration, data_dir, a primary of
  another history).  ``binlog-relay run`` logs it and exits 1.
- ``RetryableError``: the peer or the network (refused login, ERR from the primary, no candidate
  primary yet): ingest backs off and reconnects, a downstream session is closed.
- ``Refusal``: one client request cannot be served (a dump start, a PURGE, a damaged stored event);
  the client gets the ERR a primary would send and the relay carries on.
- ``InputError``: bytes or text that do not parse or do not fit (a binlog event, a GTID list, a
  packet, a dump stream); the caller that knows where they came from turns it into one of the kinds
  above.  So are the sans-IO layers' errors whose meaning only their caller knows: a broken packet
  (``ProtocolError``) is retried by ingest and ends a downstream session, a dump stream that cannot
  be stored (``StreamError``) stops ingest (relay/ingest/errors.py decides for ingest).

Ground floor: imports nothing of the relay, so any layer may raise these.
"""

from __future__ import annotations


class RelayError(Exception):
    """Base of the relay's own errors."""


class FatalError(RelayError):
    """Retrying cannot help: the relay stops and says why."""


class RetryableError(RelayError):
    """A peer or network failure: tried again after a back-off."""


class Refusal(RelayError):
    """One client request refused with the ERR a primary would send; the relay carries on."""


class InputError(RelayError, ValueError):
    """Malformed input: a binlog event, a GTID text, a row image."""
