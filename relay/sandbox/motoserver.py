"""moto's S3 server as the sandbox runs it: ``python -m relay.sandbox.motoserver [moto_server's options]``.

Three things beyond ``moto_server`` itself:
- it dies with the process that started it (PR_SET_PDEATHSIG), even one killed with no clean-up;
- it refuses a request signed with a date more than 15 minutes off its own clock, with S3's
  answer (HTTP 403 RequestTimeTooSkewed, its RequestTime, ServerTime and
  MaxAllowedSkewMilliseconds; no body to a HEAD).  moto checks no date, so a relay whose clock
  drifted would archive happily here and not at all on S3;
- ListMultipartUploads gives each upload's real start (``Initiated``), as S3 does.  moto 5 gives
  the same 2010-11-10T20:48:33Z for every upload, so every cutoff a relay compares uploads with
  (which ones a dead relay left, relay/archive/store.py abort_stale_uploads) takes them all, and a
  test of that choice would pass whatever the relay chose.
"""

from __future__ import annotations

import ctypes
import datetime as dt
import runpy
import signal
import sys
import uuid
from typing import Any

PR_SET_PDEATHSIG = 1
MAX_SKEW = dt.timedelta(minutes=15)  # S3's
SKEWED = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>RequestTimeTooSkewed</Code><Message>The "
          "difference between the request time and the current time is too large.</Message><RequestTime>{request}"
          "</RequestTime><ServerTime>{server}</ServerTime><MaxAllowedSkewMilliseconds>900000"
          "</MaxAllowedSkewMilliseconds><RequestId>{request_id}</RequestId><HostId>motoserver</HostId></Error>")


def _report_real_starts() -> None:
    """moto's S3 classes made to keep and tell each upload's start; a moto whose classes differ is
    run as it is, with a line in its log (tests/integration/test_archive_store.py then fails on the
    start it gives)."""
    from moto.s3 import models, responses

    if not (hasattr(models, "FakeMultipart") and hasattr(responses.S3Response, "serialized")):
        print("relay/sandbox/motoserver.py: this moto's S3 classes are not the ones expected; its uploads' "
              "starts are moto's own", file=sys.stderr, flush=True)
        return
    created = models.FakeMultipart.__init__

    def created_now(self: Any, *args: Any, **kwargs: Any) -> None:
        created(self, *args, **kwargs)
        self.started_at = dt.datetime.now(dt.UTC)

    serialized = responses.S3Response.serialized

    def with_real_starts(self: Any, action_result: Any) -> Any:
        result = action_result.result
        if self.data.get("Action") == "ListMultipartUploads" and isinstance(result, dict):
            uploads = self.backend.list_multipart_uploads(self.bucket_name)
            for entry in result.get("Uploads", ()):
                upload = uploads.get(entry.get("UploadId"))
                if upload is not None and hasattr(upload, "started_at"):
                    entry["Initiated"] = upload.started_at
        return serialized(self, action_result)

    models.FakeMultipart.__init__ = created_now  # type: ignore[method-assign]
    responses.S3Response.serialized = with_real_starts  # type: ignore[method-assign]


def _refuse_skewed_requests() -> None:
    """Every request's X-Amz-Date (SigV4's signing time) checked against this host's clock first; a
    moto without this application class runs unchecked, with a line in its log
    (tests/integration/test_archive_clock.py then fails)."""
    try:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication
    except ImportError:
        print("relay/sandbox/motoserver.py: this moto has no DomainDispatcherApplication; request dates are not "
              "checked", file=sys.stderr, flush=True)
        return

    dispatch = DomainDispatcherApplication.__call__

    def checked(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        signed = environ.get("HTTP_X_AMZ_DATE", "")
        now = dt.datetime.now(dt.UTC)
        try:
            when = dt.datetime.strptime(signed, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.UTC)
        except ValueError:
            return dispatch(self, environ, start_response)  # unsigned, or signed another way: moto's business
        if abs(now - when) <= MAX_SKEW:
            return dispatch(self, environ, start_response)
        body = b"" if environ.get("REQUEST_METHOD") == "HEAD" else SKEWED.format(
            request=signed, server=now.strftime("%Y-%m-%dT%H:%M:%SZ"), request_id=uuid.uuid4().hex[:16].upper()
        ).encode()
        start_response("403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
        return [body]

    DomainDispatcherApplication.__call__ = checked  # type: ignore[method-assign]


def main() -> None:
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _refuse_skewed_requests()
    _report_real_starts()
    sys.argv = ["moto_server", *sys.argv[1:]]
    runpy.run_module("moto.server", run_name="__main__")


if __name__ == "__main__":
    main()
