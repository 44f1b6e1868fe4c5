"""A real S3 API server for the tests: moto in server mode, on a free loopback port, in a subprocess,
behind a proxy the test can take down.

moto's server keeps everything in memory and has no way to keep its state across a restart (its
"recorder" replays requests, which gives new upload ids and new ETags: not the same store), so "the
store is down" is not a stopped server but the proxy in front of it: ``refuse()`` closes its port
(connections are refused, as from a stopped store), ``blackhole()`` accepts connections and
forwards nothing (a store that hangs: only timeouts end a request), ``accept()`` and ``heal()``
undo them, and the data is still there.

Credentials can be checked for real: the set-up makes an IAM user with a key, and
``MotoProcess.checking_credentials()`` switches moto's IAM authentication on
(``/moto-api/reset-auth``) so that a request signed with anything but that key is refused as S3
refuses it.  One moto process serves the whole session (``s3_moto``, about two seconds to start);
each test gets its own bucket and its own proxy (``s3_server``).
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import threading
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import boto3
import pytest

from relay.archive.store import StoreConfig
from relay.sandbox.ports import LOOPBACK
from relay.sandbox.s3 import REGION, start_moto_server
from tests.support.certs import CertFiles
from tests.support.proxy import CuttableProxy

START_TIMEOUT = 30.0
# moto itself is started by relay/sandbox/s3.py (the benchmarks' launcher too): with PR_SET_PDEATHSIG,
# so it dies with the test process even when that one is killed and no teardown runs.


# ------------------------------------------------------------------------------ the proxy


class StoreProxy(CuttableProxy):
    """The forwarder of tests/support/proxy.py, with the store's two ways of being down."""

    def __init__(self, upstream_port: int) -> None:
        super().__init__(upstream_port)
        self._gate: threading.Condition | None = None
        self.most_held = 0

    def refuse(self) -> None:
        """Close the port and every connection through it: the next connect is refused."""
        try:  # shutdown wakes the thread blocked in accept(); close alone would leave it listening
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self.drop_connections()

    def accept(self) -> None:
        """Listen again, on the same port (SO_REUSEADDR: socket.create_server sets it)."""
        self._listener = socket.create_server((LOOPBACK, self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def blackhole(self) -> None:
        """Connections are accepted and nothing goes through (a hung store, a silent network)."""
        self.frozen.set()

    def slow(self, bytes_per_second: float) -> None:
        """What the store sends comes at that rate, on each connection (a slow network)."""
        self.rate = bytes_per_second

    def heal(self) -> None:
        self.frozen.clear()
        self.rate = None

    def hold_requests(self, together: int, deadline: float) -> None:
        """From now, what clients send waits until ``together`` requests wait at once, or for
        ``deadline`` seconds; then everything passes.  ``most_held`` is the most that waited
        together: requests made one after the other never wait two at a time."""
        self._gate = threading.Condition()
        self._held = 0
        self._together = together
        self._gate_deadline = deadline
        self._gate_open = False
        self.most_held = 0

    def _before_request(self) -> None:
        gate = self._gate
        if gate is None:
            return
        with gate:
            if self._gate_open:
                return
            self._held += 1
            self.most_held = max(self.most_held, self._held)
            gate.notify_all()
            gate.wait_for(lambda: self._gate_open or self._held >= self._together, self._gate_deadline)
            self._gate_open = True
            gate.notify_all()

    def drop_connections(self) -> None:
        """Shut down the open connections (a pump blocked in recv wakes only on shutdown)."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for sock in pair:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


# ------------------------------------------------------------------------------ moto


@dataclass
class MotoProcess:
    """moto's server, with a test user and its key (checked inside ``checking_credentials``)."""

    process: subprocess.Popen[bytes]
    port: int
    access_key_id: str
    secret_access_key: str = ""
    log_path: Path | None = None
    tls: CertFiles | None = None

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://{LOOPBACK}:{self.port}"

    def client(self) -> Any:
        """A boto3 S3 client straight to moto, with the test user's key."""
        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=self.access_key_id, aws_secret_access_key=self.secret_access_key,
                            verify=str(self.tls.ca) if self.tls else None)

    @contextmanager
    def checking_credentials(self) -> Iterator[None]:
        """While inside, every request is authenticated against moto's IAM users (the test user's
        key is accepted, any other refused as S3 refuses it).  Off by default: moto's check of a
        signature fails on a query value holding "/" (ListObjectsV2 with Prefix="archive/"), which
        S3 accepts, so only the tests of credentials turn it on, around calls without one."""
        self._set_auth("0")
        try:
            yield
        finally:
            self._set_auth("inf")

    def _set_auth(self, after_requests: str) -> None:
        request = urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth", data=after_requests.encode(),
                                         method="POST", headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=10, context=self.ssl_context()) as answer:
            answer.read()

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.tls.ca)) if self.tls else None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_moto(log_path: Path, tls: CertFiles | None = None) -> MotoProcess:
    """Start moto on a free port, wait until it answers, create the test user and its key.  With
    ``tls`` (tests/support/certs.py make_certs) it serves HTTPS with that certificate."""
    tls_args = ["-c", str(tls.cert), "-k", str(tls.key)] if tls else []
    context = ssl.create_default_context(cafile=str(tls.ca)) if tls else None
    server = start_moto_server(log_path, extra_args=tls_args, ssl_context=context, timeout=START_TIMEOUT)
    moto = MotoProcess(server.process, server.port, "bootstrap", "bootstrap", log_path, tls)
    try:
        iam = boto3.client("iam", endpoint_url=moto.endpoint, region_name=REGION, aws_access_key_id="bootstrap",
                           aws_secret_access_key="bootstrap",  # any key works while auth is off
                           verify=str(tls.ca) if tls else None)
        iam.create_user(UserName="relay")
        iam.put_user_policy(UserName="relay", PolicyName="archive", PolicyDocument=json.dumps({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="relay")["AccessKey"]
        moto.access_key_id, moto.secret_access_key = key["AccessKeyId"], key["SecretAccessKey"]
    except BaseException:
        moto.stop()
        raise
    return moto


# ------------------------------------------------------------------------------ one test's view


@dataclass
class S3Server:
    """A test's bucket on the session's moto, reached through its own ``proxy``."""

    moto: MotoProcess
    proxy: StoreProxy
    bucket: str
    secrets_dir: Path

    @property
    def endpoint(self) -> str:
        """Through the proxy: what the code under test uses."""
        return f"http://{LOOPBACK}:{self.proxy.port}"

    @property
    def access_key_id(self) -> str:
        return self.moto.access_key_id

    @property
    def secret_access_key(self) -> str:
        return self.moto.secret_access_key

    def client(self) -> Any:
        """A boto3 S3 client straight to moto (not through the proxy), to look at the bucket."""
        return self.moto.client()

    def credential_files(self, key_id: str | None = None, secret: str | None = None) -> tuple[Path, Path]:
        """Files holding an access key id and secret (the test user's unless given)."""
        name = uuid.uuid4().hex[:8]
        key_file, secret_file = self.secrets_dir / f"{name}.key_id", self.secrets_dir / f"{name}.secret"
        for path, value in ((key_file, key_id or self.access_key_id), (secret_file, secret or self.secret_access_key)):
            path.write_text(value + "\n")
            path.chmod(0o600)
        return key_file, secret_file

    def store_config(self, prefix: str = "archive", **overrides: Any) -> StoreConfig:
        """A StoreConfig for this bucket through the proxy, with the test user's key files."""
        key_file, secret_file = self.credential_files()
        config = StoreConfig(url=f"s3://{self.bucket}/{prefix}", endpoint_url=self.endpoint, region=REGION,
                             access_key_id_file=key_file, secret_access_key_file=secret_file,
                             connect_timeout=2.0, read_timeout=10.0)
        return replace(config, **overrides)

    def incomplete_uploads(self, prefix: str = "") -> list[dict[str, Any]]:
        uploads: list[dict[str, Any]] = self.client().list_multipart_uploads(Bucket=self.bucket, Prefix=prefix) \
            .get("Uploads", [])
        return uploads


@pytest.fixture(scope="session")
def s3_moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoProcess]:
    """moto's S3 server for the session (stopped at its end; it also dies with the test process)."""
    moto = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    try:
        yield moto
    finally:
        moto.stop()


@pytest.fixture
def s3_server(s3_moto: MotoProcess, tmp_path: Path) -> Iterator[S3Server]:
    """A fresh bucket on a real S3 API server, reached through a proxy the test can take down."""
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    s3_moto.client().create_bucket(Bucket=bucket)
    proxy = StoreProxy(s3_moto.port)
    secrets_dir = tmp_path / "s3-secrets"
    secrets_dir.mkdir(mode=0o700)
    try:
        yield S3Server(s3_moto, proxy, bucket, secrets_dir)
    finally:
        proxy.heal()
        proxy.close()
