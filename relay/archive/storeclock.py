"""The object store's clock as this host sees it, from the ``Date`` of the store's answers.

Three things in the archive depend on how this host's clock stands against the store's:
- S3 refuses a request signed with a date more than 15 minutes off its own (RequestTimeTooSkewed,
  HTTP 403; a HEAD's answer has no body and says only 403): a relay whose clock drifted that far
  archives nothing until its clock is set right, and its message must say so, not "check the
  credentials";
- archive.retention's ages compare the times files were archived with now, and a file's time comes
  either from this relay (its upload) or from the store (its Last-Modified, when it was listed): on
  one clock, the store's, a skewed host neither deletes files early nor keeps them late;
- an operator wants to see a drift before S3 refuses it: the offset is a metric.

Sans-IO: it is told each answer's ``Date`` and when it came.  ``Date`` has whole seconds, so the
store's time is known to about a second, plus the request's latency.
"""

from __future__ import annotations

import datetime as dt
import email.utils
import time
from collections.abc import Mapping

S3_MAX_SKEW_SECONDS = 900.0  # S3's limit on a request's date against its own clock


class StoreClock:
    """The store's time: the ``Date`` of its last answer, carried on by this host's monotonic clock,
    so that a step of this host's wall clock (NTP setting it right, an operator) changes nothing
    here until the store answers again, and then only the offset shown."""

    def __init__(self) -> None:
        self._anchor: tuple[float, float] | None = None  # (the store's time, time.monotonic()) at an answer

    def observe(self, date_header: str | None, received_at: float) -> None:
        """An answer's ``Date`` header, received at ``received_at`` (time.monotonic())."""
        when = _http_date(date_header)
        if when is not None:
            self._anchor = (when + 0.5, received_at)  # Date is truncated to the second

    def now(self, monotonic_now: float | None = None) -> float:
        """The store's time now (Unix seconds): this host's, until the store has answered."""
        if self._anchor is None:
            return time.time()
        store_then, answered_at = self._anchor
        return store_then + (time.monotonic() if monotonic_now is None else monotonic_now) - answered_at

    def offset(self) -> float | None:
        """The store's clock minus this host's, in seconds; None until the store has answered."""
        return None if self._anchor is None else self.now() - time.time()


def describe_offset(offset: float) -> str:
    """``offset``: the store's time minus this host's."""
    side = "behind" if offset > 0 else "ahead of"
    return f"this host's clock is {abs(offset):.0f} s {side} the store's"


def skew_from_error(error: Mapping[str, object]) -> float | None:
    """The store's time minus the request's, from a RequestTimeTooSkewed answer's body (S3 gives
    RequestTime, as the request was signed, and ServerTime); None if it does not hold them."""
    requested = _amz_date(str(error.get("RequestTime", "")))
    served = _iso_date(str(error.get("ServerTime", "")))
    if requested is None or served is None:
        return None
    return served - requested


def _http_date(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def _amz_date(text: str) -> float | None:
    """20261129T120000Z, as SigV4 signs."""
    try:
        return dt.datetime.strptime(text, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC).timestamp()
    except ValueError:
        return None


def _iso_date(text: str) -> float | None:
    """2026-11-29T12:00:00Z (or with fractions of a second)."""
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
