"""moto's S3 server as the sandbox runs it: ``python -m relay.sandbox.motoserver [moto_server's options]``.

Two things beyond ``moto_server`` itself:
- it dies with the process that started it (PR_SET_PDEATHSIG), even one killed with no clean-up;
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
from typing import Any

PR_SET_PDEATHSIG = 1


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


def main() -> None:
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    _report_real_starts()
    sys.argv = ["moto_server", *sys.argv[1:]]
    runpy.run_module("moto.server", run_name="__main__")


if __name__ == "__main__":
    main()
