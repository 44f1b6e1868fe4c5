"""relay/archive/storeclock.py: the store's time from its answers' Date, carried on by the monotonic
clock, and the words for how far off this host's clock is."""

from __future__ import annotations

import datetime as dt
import time

from relay.archive.storeclock import StoreClock, describe_offset, skew_from_error


def _stamp(year: int, month: int, day: int, hour: int, minute: int, second: int) -> float:
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC).timestamp()


def test_the_stores_time_goes_on_from_its_last_answer_by_the_monotonic_clock():
    clock = StoreClock()
    clock.observe("Sun, 29 Nov 2026 12:00:00 GMT", received_at=100.0)
    # the middle of the second Date names, and 7.25 s of this host's monotonic clock since
    assert clock.now(monotonic_now=107.25) == _stamp(2026, 11, 29, 12, 0, 7) + 0.75
    clock.observe("Sun, 29 Nov 2026 12:10:00 GMT", received_at=200.0)
    assert clock.now(monotonic_now=200.0) == _stamp(2026, 11, 29, 12, 10, 0) + 0.5


def test_before_any_answer_it_is_this_hosts_time_and_no_offset():
    clock = StoreClock()
    before = time.time()
    assert before <= clock.now() <= time.time()
    assert clock.offset() is None


def test_an_answer_without_a_readable_date_changes_nothing():
    clock = StoreClock()
    clock.observe("Sun, 29 Nov 2026 12:00:00 GMT", received_at=100.0)
    for header in (None, "", "yesterday", "Sun, 99 Nov 2026 12:00:00 GMT"):
        clock.observe(header, received_at=500.0)
    assert clock.now(monotonic_now=100.5) == _stamp(2026, 11, 29, 12, 0, 1)


def test_the_offset_is_the_stores_clock_minus_this_hosts():
    clock = StoreClock()
    store_now = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1200)  # this host 20 minutes ahead
    clock.observe(store_now.strftime("%a, %d %b %Y %H:%M:%S GMT"), received_at=time.monotonic())
    offset = clock.offset()
    assert offset is not None and abs(offset + 1200) <= 1.5
    assert describe_offset(offset).endswith(" s ahead of the store's")


def test_the_words_say_which_way():
    assert describe_offset(-1200.4) == "this host's clock is 1200 s ahead of the store's"
    assert describe_offset(61.0) == "this host's clock is 61 s behind the store's"


def test_skew_from_s3s_answer():
    """S3's RequestTimeTooSkewed body: RequestTime as signed (SigV4's form), ServerTime in ISO 8601."""
    answer = {"Code": "RequestTimeTooSkewed", "RequestTime": "20150604T232559Z",
              "ServerTime": "2015-06-04T22:26:16Z", "MaxAllowedSkewMilliseconds": "900000"}
    assert skew_from_error(answer) == _stamp(2015, 6, 4, 22, 26, 16) - _stamp(2015, 6, 4, 23, 25, 59)
    assert skew_from_error({"Code": "RequestTimeTooSkewed"}) is None
    assert skew_from_error({"RequestTime": "soon", "ServerTime": "2015-06-04T22:26:16.000Z"}) is None
