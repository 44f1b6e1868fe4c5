"""How far behind its primary the relay is: MariaDB's Seconds_Behind_Master (sql/slave.cc,
show_master_info) for a replica whose receiving and storing are one step.  Read by the metrics
(binlog_relay_upstream_lag_seconds) and by SHOW SLAVE STATUS, so both say the same."""

from __future__ import annotations

import math

from .status import UpstreamStatus


def caught_up(status: UpstreamStatus, committed: tuple[str, int] | None) -> bool:
    """Everything the primary sent is read (nothing waits in the connection's receive queue),
    parsed (no group half received) and committed: MariaDB's "the SQL thread has executed everything
    the IO thread read"."""
    stream = status.stream
    if not status.connected or stream is None or committed is None:
        return False
    return (committed[0], committed[1]) == (stream.file, stream.position) and not stream.inside_group \
        and status.unread_bytes() == 0


def lag_seconds(status: UpstreamStatus, committed: tuple[str, int] | None, now: float) -> float:
    """- not connected: NaN, as MariaDB shows NULL while its IO thread is not connected: the relay
      cannot know what the primary is doing;
    - caught up: 0;
    - otherwise the age of the newest stored event: now - clock difference with the primary (taken
      at connect, as MariaDB's clock_diff_with_master) - the event's timestamp; NaN while the new
      connection has brought no transaction yet (MariaDB shows 0 there, which would read "caught
      up" for a relay that may be far behind)."""
    stream = status.stream
    if not status.connected or stream is None:
        return math.nan
    if caught_up(status, committed):
        return 0.0
    if not stream.last_event_timestamp:
        return math.nan  # nothing received on this connection yet: the age is not known
    return max(0.0, now - status.clock_difference - stream.last_event_timestamp)
