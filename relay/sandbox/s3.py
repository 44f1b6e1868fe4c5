"""A throw-away S3 API server on loopback: moto in server mode, in a subprocess, for the archive's
benchmark and tests (moto is in the test and bench extras; the relay itself never needs it).

    moto = start_moto_server(work_dir / "moto.log")     # a free port, answering when returned
    moto.create_bucket("bench")                         # archive.url: s3://bench/prefix
    ... archive.endpoint_url: moto.endpoint, region REGION, any access key (no auth by default) ...
    moto.reset()                                        # forget every bucket and object (memory)
    moto.stop()

moto keeps everything in memory, and until something switches its IAM authentication on
(``/moto-api/reset-auth``, tests/support/s3.py) it accepts any key and unsigned requests, so the
bucket is made here with a plain HTTP PUT: nothing beyond the standard library is imported.  The
server runs as relay/sandbox/motoserver.py starts it: it dies with the process that started it even
when that one is killed and no clean-up runs, and tells the real start of a multipart upload.
"""

from __future__ import annotations

import signal
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .errors import SandboxError, WaitTimeout, file_tail
from .polling import wait_for
from .ports import LOOPBACK, free_port
from .relayprocess import PACKAGE_ROOT

REGION = "us-east-1"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0


class MotoError(SandboxError):
    """moto did not start (not installed? see the log's tail in the message), or exited."""


@dataclass
class MotoServer:
    """moto's server process on ``port`` (HTTPS when started with a certificate: ``ssl_context``
    then trusts it)."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    ssl_context: ssl.SSLContext | None = None

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def answers(self) -> bool:
        """True once moto answers HTTP; MotoError if it exited."""
        if self.process.poll() is not None:
            raise MotoError(f"moto server exited with {self.process.returncode}:\n{file_tail(self.log_path, 0, 40)}")
        with urllib.request.urlopen(f"{self.endpoint}/moto-api/data.json", timeout=2,
                                    context=self.ssl_context) as answer:
            return bool(answer.status == 200)

    def request(self, method: str, path: str, data: bytes = b"", timeout: float = 10.0) -> bytes:
        """An unsigned request (moto accepts them while its IAM authentication is off)."""
        request = urllib.request.Request(f"{self.endpoint}{path}", data=data, method=method)
        with urllib.request.urlopen(request, timeout=timeout, context=self.ssl_context) as answer:
            body: bytes = answer.read()
            return body

    def create_bucket(self, name: str) -> None:
        """A bucket in REGION (us-east-1: no location constraint)."""
        self.request("PUT", f"/{name}")

    def reset(self) -> None:
        """Forget every bucket, object and user: moto's memory back to empty."""
        self.request("POST", "/moto-api/reset")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT)


def start_moto_server(log_path: Path, *, extra_args: Sequence[str] = (), ssl_context: ssl.SSLContext | None = None,
                      timeout: float = START_TIMEOUT) -> MotoServer:
    """moto's server on a free loopback port, answering when returned; its output goes to ``log_path``.
    ``extra_args``: more of moto_server's options (``-c CERT -k KEY`` for HTTPS, with an
    ``ssl_context`` that trusts it)."""
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen([sys.executable, "-m", "relay.sandbox.motoserver", "-H", LOOPBACK, "-p", str(port),
                                    *extra_args], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=PACKAGE_ROOT)
    server = MotoServer(process, port, Path(log_path), ssl_context)
    try:
        wait_for(server.answers, timeout, f"moto server on port {port} answering", ignore=(OSError,))
    except WaitTimeout as late:
        server.stop()
        raise MotoError(f"{late}\n{file_tail(server.log_path, 0, 40)}") from None
    except BaseException:
        server.stop()
        raise
    return server
