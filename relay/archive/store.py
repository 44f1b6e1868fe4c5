"""The object store client of the archive: S3 and S3-compatible stores (MinIO, Ceph RGW, GCS's and
R2's S3 APIs), through boto3.

What the archive needs and nothing more (``ObjectStore``): put an object streamed from an iterable of
byte strings (one PUT up to ``multipart_threshold``, a multipart upload above it: the object appears
at its key only when CompleteMultipartUpload succeeds, atomically, so a killed upload never leaves a
partial object there), get a byte range, head, list a prefix, delete, and abort the incomplete
multipart uploads a killed upload left under our prefix (they cost storage until aborted).  Names
are relative to the prefix of the store's URL (``s3://bucket/prefix``).

Every call blocks: the trio shell runs them in worker threads (``trio.to_thread.run_sync``); one
``S3Store`` is safe to share between threads (a boto3 client is).  Why boto3 rather than obstore (the
Rust object_store bindings), measured against moto's S3 server on loopback: obstore spends less
client CPU (about half on uploads, three quarters on ranged GETs) but neither is close to being the
archive's cost (compressing is), obstore cannot list or abort the incomplete multipart uploads a
killed relay leaves (object_store has no such call), does not read the shared credentials file of
the standard AWS chain, and its async API is for asyncio, not trio, so it would run in worker
threads all the same.  Only this module knows which library it is.

Errors, by what the caller should do: ``StoreUnavailable`` (a ``RetryableError``: the store is
unreachable, slow, overloaded or answered 5xx; try again later), ``StoreAccessError`` (a
``FatalError``: credentials refused, access denied, no such bucket, TLS verification failed, or
``StoreClockSkewed``, this host's clock too far off the store's; an operator must act),
``ObjectMissing`` (a ``Refusal``: the key is not there).  No message ever holds a
secret: they are built from the store's error code and text, and scrubbed of the credentials.

An access key given as files is read again every KEY_FILES_REREAD_SECONDS, so a key rotated in
place (a Kubernetes Secret updated) is signed with within a minute, without a restart; files that
cannot be read then leave the key read before in use.
"""

from __future__ import annotations

import base64
import collections
import datetime as dt
import itertools
import logging
import re
import threading
import time
import urllib.parse
import zlib
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import boto3
import botocore.config
import botocore.credentials
import botocore.exceptions
import botocore.session
import botocore.utils

from ..errors import FatalError, InputError, Refusal, RelayError, RetryableError
from .storeclock import S3_MAX_SKEW_SECONDS, StoreClock, describe_offset, skew_from_error

if TYPE_CHECKING:  # boto3-stubs[s3], for the type checker only
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

log = logging.getLogger(__name__)

MIB = 1 << 20
KEY_FILES_REREAD_SECONDS = 60.0  # an access key given as files is read again this often
MIN_PART_SIZE = 5 * MIB  # S3's smallest part but the last
MAX_PARTS = 10_000

# Error codes by kind.  Throttling and the store's own failures are worth retrying; credentials and
# permissions are not (the same request will be refused again until an operator acts).
_MISSING = {"NoSuchKey", "404", "NotFound"}
_NO_BUCKET = {"NoSuchBucket"}
_ACCESS = {"InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken",
           "TokenRefreshRequired", "AllAccessDisabled", "AccountProblem", "InvalidClientTokenId",
           "UnrecognizedClientException", "RequestTimeTooSkewed", "403", "Forbidden"}
# NoSuchUpload: our multipart upload was aborted under us (another process's clean-up): start over.
_RETRYABLE = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeoutException",
              "InternalError", "ServiceUnavailable", "503", "500", "OperationAborted", "NoSuchUpload"}
_LATER = "a passing failure, try again later"
_BOTO_ERRORS = (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError)
_UNREACHABLE = (botocore.exceptions.EndpointConnectionError, botocore.exceptions.ConnectionClosedError,
                botocore.exceptions.ConnectTimeoutError, botocore.exceptions.ReadTimeoutError,
                botocore.exceptions.ResponseStreamingError, botocore.exceptions.IncompleteReadError,
                botocore.exceptions.ProxyConnectionError, botocore.exceptions.HTTPClientError)


class StoreUnavailable(RetryableError):
    """The object store cannot be reached or failed this time: retried after a back-off."""


class StoreAccessError(FatalError):
    """The object store refuses us (credentials, permissions, bucket, TLS): an operator must act."""


class StoreClockSkewed(StoreAccessError):
    """The store refuses requests dated so far from its own clock: this host's clock must be set right."""


class ObjectMissing(Refusal):
    """No object at that key."""


# ------------------------------------------------------------------------------ configuration


@dataclass(frozen=True)
class StoreURL:
    """``s3://bucket/prefix``: where the archive lives.  ``prefix`` is empty or ends with "/"."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> StoreURL:
        match = re.fullmatch(r"s3://([^/?#\s]+)(?:/([^?#]*))?", url)
        if "@" in url.partition("://")[2].partition("/")[0]:
            raise InputError(f"object store URL: {_NO_USERINFO}")
        shown = " (not repeated: it holds '@')" if "@" in url else f" {url!r}"  # a password with a '/', say
        if match is None:
            raise InputError(f"object store URL{shown}: expected s3://bucket or s3://bucket/prefix")
        bucket, prefix = match.group(1), (match.group(2) or "").strip("/")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{1,254}", bucket):
            raise InputError(f"object store URL{shown}: " + ("not a bucket name" if "@" in url else
                                                               f"{bucket!r} is not a bucket name"))
        return cls(bucket, f"{prefix}/" if prefix else "")

    def key(self, name: str) -> str:
        """The store key of a name relative to the prefix."""
        if not name or name.startswith("/"):
            raise ValueError(f"object name {name!r}: expected a relative name")
        return self.prefix + name

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


_NO_USERINFO = ("must not hold a user name or password (user:password@), not repeated here: give the store's keys "
                "as access_key_id_file and secret_access_key_file, or by the AWS chain")
# botocore's validate_region_name, whose "$" would let a trailing newline through
_REGION = re.compile(r"(?![0-9]+$)(?!-)[a-zA-Z0-9-]{1,63}(?<!-)", re.ASCII)


def check_endpoint_url(url: str) -> None:
    """That botocore can send requests to ``url``: http or https, a host, a port from 1 to 65535 if
    any, no query; InputError if not.  A URL with user:password@ is refused without being repeated."""
    if "@" in url:
        raise InputError(f"endpoint URL: {_NO_USERINFO}")
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:  # "Invalid IPv6 URL", "Port could not be cast to integer value as 'abc'"
        problem = "expected a port from 1 to 65535" if "port" in str(exc).lower() else f"not a URL ({exc})"
        raise InputError(f"endpoint URL {url!r}: {problem}") from None
    if not re.fullmatch(r"[!-~]+", url):
        problem = "has a space, a control character or a character outside ASCII"
    elif parts.scheme not in ("http", "https"):
        problem = "expected http:// or https://"
    elif not parts.hostname:
        problem = "names no host"
    elif port == 0:
        problem = "expected a port from 1 to 65535"
    elif parts.query or parts.fragment:
        problem = "must have no query (?...) or fragment (#...)"
    elif not botocore.utils.is_valid_uri(url):
        problem = "not a host name or IP address botocore accepts"
    else:
        return
    raise InputError(f"endpoint URL {url!r}: {problem}")


def check_region(region: str) -> None:
    """That ``region`` is a region name botocore accepts (letters, digits and '-', as us-east-1)."""
    if not _REGION.fullmatch(region):
        raise InputError(f"region {region!r}: expected letters, digits and '-' (1 to 63, not all digits, "
                         "no '-' first or last), as us-east-1")


@dataclass(frozen=True)
class StoreConfig:
    """How to reach the store.  Credentials come from the standard AWS chain (environment
    variables, the shared credentials and config files, ``profile``, container or instance roles)
    unless ``access_key_id_file`` and ``secret_access_key_file`` name files holding them."""

    url: str
    endpoint_url: str | None = None  # an S3-compatible store; None: AWS S3 of ``region``
    region: str | None = None
    profile: str | None = None
    access_key_id_file: Path | None = None
    secret_access_key_file: Path | None = None
    session_token_file: Path | None = None
    verify_tls: bool = True
    ca_bundle: Path | None = None  # a private CA of an S3-compatible store
    # "path" suits every S3-compatible store; None: path style with an endpoint_url, else AWS's choice
    addressing_style: Literal["auto", "path", "virtual"] | None = None
    # Some S3-compatible stores refuse the CRC32 checksums newer botocore sends on every upload:
    # "when_required" sends them only where the API requires one.
    request_checksums: Literal["when_supported", "when_required"] = "when_supported"
    connect_timeout: float = 5.0
    read_timeout: float = 60.0  # without a byte from the store: not the time of a whole transfer
    max_attempts: int = 3  # per call, with botocore's back-off; the caller's loop retries further
    multipart_threshold: int = 16 * MIB
    part_size: int = 8 * MIB
    upload_concurrency: int = 4  # parts of one object in flight at once

    def __post_init__(self) -> None:
        StoreURL.parse(self.url)
        if self.part_size < MIN_PART_SIZE:
            raise InputError(f"object store part size {self.part_size}: S3 needs at least {MIN_PART_SIZE} bytes")
        if self.upload_concurrency < 1:
            raise InputError(f"object store upload concurrency {self.upload_concurrency}: at least 1")
        if (self.access_key_id_file is None) != (self.secret_access_key_file is None):
            raise InputError("object store credentials: give both access_key_id_file and secret_access_key_file")


@dataclass(frozen=True)
class ObjectHead:
    name: str
    size: int
    etag: str
    checksum: str | None  # "CRC32:<base64>" and the like, when the store keeps one
    last_modified: dt.datetime | None = None


@dataclass(frozen=True)
class ListedObject:
    name: str
    size: int
    etag: str
    last_modified: dt.datetime | None = None


@dataclass(frozen=True)
class PutResult:
    name: str
    size: int
    etag: str
    parts: int  # 0: a single PUT
    crc32: int  # of the whole object as sent
    # The store's checksum of the object (``ObjectHead.checksum``) if it holds exactly the bytes sent,
    # in each form a store may give it: the whole object's CRC32, or the CRC32 of the parts' CRC32s
    # (S3's "composite" checksum of a multipart upload, with or without its "-<parts>" suffix).
    # Empty: no checksum was asked of the store (``request_checksums: when_required``).
    checksums: frozenset[str] = frozenset()


class ObjectStore(Protocol):
    """What the archive needs of an object store (names are relative to the store's prefix)."""

    def put(self, name: str, chunks: Iterable[bytes | bytearray | memoryview]) -> PutResult: ...
    def get(self, name: str) -> bytes: ...
    def get_range(self, name: str, start: int, end: int) -> bytes: ...
    def get_tail(self, name: str, length: int) -> tuple[bytes, int]: ...
    def get_pieces(self, name: str, start: int, sizes: Sequence[int]) -> Generator[bytes, None, None]: ...
    def head(self, name: str) -> ObjectHead | None: ...
    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ListedObject]: ...
    def delete(self, name: str) -> None: ...
    def abort_stale_uploads(self, under: str = "", initiated_before: dt.datetime | None = None) -> int: ...
    def check(self) -> None: ...
    @property
    def clock(self) -> StoreClock: ...


# ------------------------------------------------------------------------------ boto3


@dataclass(frozen=True)
class _Secrets:
    values: tuple[str, ...] = field(repr=False)
    key_files: _KeyFiles | None = field(default=None, repr=False)  # their values as last read

    def scrub(self, text: str) -> str:
        for value in self.values + (self.key_files.secrets() if self.key_files else ()):
            if value:
                text = text.replace(value, "<redacted>")
        return text


class _KeyFiles(botocore.credentials.CredentialProvider):
    """The access key, secret and session token of ``access_key_id_file``,
    ``secret_access_key_file`` and ``session_token_file``, as credentials botocore asks for again
    once they are KEY_FILES_REREAD_SECONDS old (at the first request after that)."""

    METHOD = "key-files"
    CANONICAL_NAME = "binlog-relay-key-files"

    def __init__(self, config: StoreConfig) -> None:
        super().__init__()
        self._config = config
        self._values = self._read()  # unreadable at start: StoreAccessError, the store is not opened

    def _read(self) -> tuple[str, str, str | None]:
        config = self._config
        assert config.access_key_id_file is not None and config.secret_access_key_file is not None
        token = None if config.session_token_file is None else _read_secret(config.session_token_file,
                                                                             "session token")
        return (_read_secret(config.access_key_id_file, "access key id"),
                _read_secret(config.secret_access_key_file, "secret access key"), token)

    def secrets(self) -> tuple[str, ...]:
        return tuple(value for value in self._values[1:] if value)

    def _metadata(self) -> dict[str, str | None]:
        key_id, secret, token = self._values
        expiry = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=KEY_FILES_REREAD_SECONDS)
        return {"access_key": key_id, "secret_key": secret, "token": token, "expiry_time": expiry.isoformat()}

    def _reread(self) -> dict[str, str | None]:
        try:
            self._values = self._read()
        except StoreAccessError as exc:  # a file being replaced, say: the key read before still signs
            log.warning("%s; the key read before is used until it can be read", exc)
        return self._metadata()

    def load(self) -> botocore.credentials.RefreshableCredentials:
        return botocore.credentials.RefreshableCredentials.create_from_metadata(
            self._metadata(), self._reread, self.METHOD, advisory_timeout=0, mandatory_timeout=0)


def _read_secret(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        # the OSError names the file and the reason, never the content
        raise StoreAccessError(f"object store {what} file {path}: cannot read it ({type(exc).__name__}: "
                               f"{getattr(exc, 'strerror', None) or 'not UTF-8 text'})") from None


class S3Store:
    """``ObjectStore`` over boto3's S3 client."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.url = StoreURL.parse(config.url)
        try:  # checked before self.where repeats it in every message
            if config.endpoint_url is not None:
                check_endpoint_url(config.endpoint_url)
            if config.region is not None:
                check_region(config.region)
        except InputError as bad:
            raise StoreAccessError(f"object store {self.url}: {bad}") from None
        self.where = f"{self.url}" + (f" at {config.endpoint_url}" if config.endpoint_url else "")
        core = botocore.session.Session()
        key_files = None
        if config.access_key_id_file is not None and config.secret_access_key_file is not None:
            key_files = _KeyFiles(config)
            core.get_component("credential_provider").insert_before("env", key_files)
        try:
            session = boto3.session.Session(region_name=config.region, profile_name=config.profile,
                                            botocore_session=core)
            found = session.get_credentials()
            frozen = found.get_frozen_credentials() if found is not None else None
        except botocore.exceptions.BotoCoreError as exc:
            # ProfileNotFound, PartialCredentialsError (AWS_ACCESS_KEY_ID without the secret), ConfigParseError
            # (a malformed ~/.aws/config), InvalidRegionError: their messages name a profile, a variable or a file
            raise StoreAccessError(f"object store {self.where}: the AWS configuration: {_botocore_problem(exc)}") \
                from None
        # the secrets this store signs with: scrubbed from every message, should a store echo one
        self._secrets = _Secrets(tuple(value for value in (
            frozen.secret_key if frozen else None, frozen.token if frozen else None) if value), key_files)
        addressing = config.addressing_style or ("path" if config.endpoint_url else "auto")
        client_config = botocore.config.Config(
            connect_timeout=config.connect_timeout,
            read_timeout=config.read_timeout,
            retries={"total_max_attempts": config.max_attempts, "mode": "standard"},  # the first one included
            s3={"addressing_style": addressing},
            request_checksum_calculation=config.request_checksums,
            response_checksum_validation="when_supported",
            max_pool_connections=16,
        )
        # Each part's CRC32 is sent with it (the store refuses a part whose bytes differ: BadDigest) and
        # the store keeps the object's checksum, which the archive compares after an upload instead of
        # reading the whole object back.
        self._checksums = config.request_checksums == "when_supported"
        verify: bool | str = str(config.ca_bundle) if config.ca_bundle is not None else config.verify_tls
        try:
            self._client: S3Client = session.client("s3", endpoint_url=config.endpoint_url, verify=verify,
                                                    config=client_config)
        except (ValueError, botocore.exceptions.BotoCoreError) as exc:  # what the checks above did not foresee
            raise StoreAccessError(f"object store {self.where}: cannot make a client: "
                                   f"{self._secrets.scrub(_botocore_problem(exc))}") from None
        self._clock = StoreClock()
        self._client.meta.events.register("after-call.s3", self._answered)  # errors' answers too
        # (key, upload id) of the multipart uploads whose abort failed (the store went away mid-upload):
        # aborted before the next upload, so a relay that runs on does not leave them until a restart
        self._left_uploads: set[tuple[str, str]] = set()
        self._left_lock = threading.Lock()

    @property
    def clock(self) -> StoreClock:
        """The store's clock against this host's, as its last answer's Date told."""
        return self._clock

    def _answered(self, http_response: object = None, **_: object) -> None:
        headers = getattr(http_response, "headers", None)
        if headers is not None:
            self._clock.observe(headers.get("Date"), time.monotonic())

    def __repr__(self) -> str:
        return f"S3Store({self.where})"

    # --- the interface

    def check(self) -> None:
        """That the bucket exists and the credentials are accepted (HeadBucket): for start-up, so a
        configuration error is told at once instead of at the first archived file."""
        try:
            self._client.head_bucket(Bucket=self.url.bucket)
        except _BOTO_ERRORS as exc:
            if _code(exc) in _MISSING:  # HeadBucket has no body: a 404 is the bucket
                raise StoreAccessError(f"object store {self.where}: bucket '{self.url.bucket}' does not exist") \
                    from None
            raise self._error(exc, "checking the bucket") from None

    def put(self, name: str, chunks: Iterable[bytes | bytearray | memoryview]) -> PutResult:
        """Store the concatenation of ``chunks`` at ``name``, holding at most about two parts in
        memory; a chunk is kept as given until its part is cut (copied once, then), so a caller
        must not change a buffer it has handed over.  Above ``multipart_threshold`` bytes it is a
        multipart upload, aborted if anything fails here (if the store is gone by then, before the
        next upload); if the process dies instead, the incomplete upload stays until
        ``abort_stale_uploads``, and the key shows no object (or still the previous one)."""
        self._abort_left_uploads()
        key = self.url.key(name)
        source = iter(chunks)
        held: list[bytes | bytearray | memoryview] = []
        size = 0
        for chunk in source:
            held.append(chunk)
            size += len(chunk)
            if size > self.config.multipart_threshold:
                return self._put_multipart(name, key, itertools.chain(held, source))
        body = b"".join(held)
        crc32 = zlib.crc32(body)
        try:
            if self._checksums:
                answer = self._client.put_object(Bucket=self.url.bucket, Key=key, Body=body,
                                                 ChecksumAlgorithm="CRC32", ChecksumCRC32=_base64(crc32))
            else:
                answer = self._client.put_object(Bucket=self.url.bucket, Key=key, Body=body)
        except _BOTO_ERRORS as exc:
            raise self._error(exc, "storing", name) from None
        return PutResult(name, len(body), answer.get("ETag", ""), 0, crc32,
                         frozenset({_checksum_text(crc32)}) if self._checksums else frozenset())

    def _put_multipart(self, name: str, key: str, source: Iterator[bytes | bytearray | memoryview]) -> PutResult:
        try:
            if self._checksums:
                started = self._client.create_multipart_upload(Bucket=self.url.bucket, Key=key,
                                                               ChecksumAlgorithm="CRC32")
            else:
                started = self._client.create_multipart_upload(Bucket=self.url.bucket, Key=key)
            upload_id = started["UploadId"]
        except _BOTO_ERRORS as exc:
            raise self._error(exc, "starting the upload of", name) from None
        parts = _PartUploads(self._client, self.url.bucket, key, upload_id, self.config, self._checksums)
        try:
            for body in _parts(source, self.config.part_size):
                parts.send(body)
            answer = self._client.complete_multipart_upload(Bucket=self.url.bucket, Key=key, UploadId=upload_id,
                                                            MultipartUpload={"Parts": parts.completed()})
        except BaseException as exc:
            # Whatever failed (the store, or the source of the bytes), leave no upload behind: the parts
            # still in flight first, or they could land after the abort.
            parts.cancel()
            try:
                self._client.abort_multipart_upload(Bucket=self.url.bucket, Key=key, UploadId=upload_id)
            except _BOTO_ERRORS:
                with self._left_lock:
                    self._left_uploads.add((key, upload_id))
            if isinstance(exc, _BOTO_ERRORS):
                raise self._error(exc, "uploading", name) from None
            raise  # the source's own error (reading the file, the writer), or the relay's
        finally:
            parts.close()
        return PutResult(name, parts.size, answer.get("ETag", ""), len(parts.sent), parts.crc32, parts.checksums())

    def _abort_left_uploads(self) -> None:
        """The uploads whose abort failed, aborted now if the store answers (one that does not stops
        the round: the upload about to begin will fail the same way)."""
        with self._left_lock:
            left = sorted(self._left_uploads)
        for key, upload_id in left:
            try:
                self._client.abort_multipart_upload(Bucket=self.url.bucket, Key=key, UploadId=upload_id)
            except botocore.exceptions.ClientError as exc:
                if _code(exc) != "NoSuchUpload":  # refused: tried again before the next upload
                    return
                # NoSuchUpload: another relay's clean-up aborted it already
            except _BOTO_ERRORS:
                return
            with self._left_lock:
                self._left_uploads.discard((key, upload_id))
            log.info("archive: the unfinished upload of %s left by a failed upload is aborted", key)

    def get(self, name: str) -> bytes:
        """The whole object; ObjectMissing when there is none."""
        return self._get(name, None)[0]

    def get_range(self, name: str, start: int, end: int) -> bytes:
        """Bytes ``start..end-1`` of the object (fewer if the object ends before ``end``)."""
        if not 0 <= start < end:
            raise ValueError(f"byte range {start}..{end} of {name}")
        return self._get(name, f"bytes={start}-{end - 1}")[0]

    def get_tail(self, name: str, length: int) -> tuple[bytes, int]:
        """The object's last ``length`` bytes (all of it if it is shorter) and its size: one GET,
        where a HEAD and a ranged GET would wait for each other."""
        if length < 1:
            raise ValueError(f"the last {length} bytes of {name}")
        return self._get(name, f"bytes=-{length}")

    def _get(self, name: str, byte_range: str | None) -> tuple[bytes, int]:
        """The object's bytes (of ``byte_range``, if given) and the object's whole size."""
        try:
            if byte_range is None:
                answer = self._client.get_object(Bucket=self.url.bucket, Key=self.url.key(name))
            else:
                answer = self._client.get_object(Bucket=self.url.bucket, Key=self.url.key(name), Range=byte_range)
            body: bytes = answer["Body"].read()  # botocore checks it against Content-Length
        except _BOTO_ERRORS as exc:
            raise self._error(exc, "reading", name) from None
        # "bytes 6-9/10"; a store that ignores the range sends the whole object without one
        whole = answer.get("ContentRange", "").rpartition("/")[2]
        return body, int(whole) if whole.isdigit() else len(body)

    def get_pieces(self, name: str, start: int, sizes: Sequence[int]) -> Generator[bytes, None, None]:
        """Consecutive pieces of the object from ``start``, of ``sizes`` bytes each, streamed from
        one ranged GET: one piece in memory at a time however long the range.  A piece comes
        shorter, and is the last, if the object ends before it does."""
        end = start + sum(sizes)
        if not 0 <= start < end:
            raise ValueError(f"byte range {start}..{end} of {name}")
        try:
            answer = self._client.get_object(Bucket=self.url.bucket, Key=self.url.key(name),
                                             Range=f"bytes={start}-{end - 1}")
            body = answer["Body"]
            try:
                for size in sizes:
                    piece: bytes = body.read(size)
                    yield piece
                    if len(piece) < size:
                        return
            finally:
                body.close()
        except _BOTO_ERRORS as exc:
            raise self._error(exc, "reading", name) from None

    def head(self, name: str) -> ObjectHead | None:
        """Size, ETag and the store's checksum of the object, None when there is none."""
        try:
            answer = self._client.head_object(Bucket=self.url.bucket, Key=self.url.key(name), ChecksumMode="ENABLED")
        except _BOTO_ERRORS as exc:
            if _code(exc) in _MISSING:
                return None
            raise self._error(exc, "looking up", name) from None
        stored = {"CRC64NVME": answer.get("ChecksumCRC64NVME"), "CRC32C": answer.get("ChecksumCRC32C"),
                  "CRC32": answer.get("ChecksumCRC32"), "SHA256": answer.get("ChecksumSHA256"),
                  "SHA1": answer.get("ChecksumSHA1")}
        checksum = next((f"{algorithm}:{value}" for algorithm, value in stored.items() if value), None)
        return ObjectHead(name, int(answer["ContentLength"]), answer.get("ETag", ""), checksum,
                          answer.get("LastModified"))

    def list(self, prefix: str = "", start_after: str = "") -> Iterator[ListedObject]:
        """The objects whose names start with ``prefix``, in key order (paged as the store pages),
        from the first whose name sorts after ``start_after`` (if given)."""
        start = len(self.url.prefix)
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            if start_after:  # (an empty start-after is not sent: not every S3-compatible store ignores it)
                pages = paginator.paginate(Bucket=self.url.bucket, Prefix=self.url.prefix + prefix,
                                           StartAfter=self.url.key(start_after))
            else:
                pages = paginator.paginate(Bucket=self.url.bucket, Prefix=self.url.prefix + prefix)
            for page in pages:
                for item in page.get("Contents", ()):
                    yield ListedObject(item["Key"][start:], int(item["Size"]), item.get("ETag", ""),
                                       item.get("LastModified"))
        except _BOTO_ERRORS as exc:
            raise self._error(exc, "listing", prefix or "(all)") from None

    def delete(self, name: str) -> None:
        """Remove the object (no error if there is none: S3 answers the same)."""
        try:
            self._client.delete_object(Bucket=self.url.bucket, Key=self.url.key(name))
        except _BOTO_ERRORS as exc:
            raise self._error(exc, "deleting", name) from None

    def abort_stale_uploads(self, under: str = "", initiated_before: dt.datetime | None = None) -> int:
        """Abort the incomplete multipart uploads under our prefix (and ``under`` it, the archive's
        objects: an archive whose prefix holds another's is not the other's to clean) started before
        ``initiated_before``; return how many.  By default, before the store's time as it lists
        them, and a second more (its Date has whole seconds): S3 dates an upload by its own clock,
        which this host's may be minutes off.  So for a process that has not begun uploading: at a
        relay's start, or once it has claimed the archive, when a killed relay's upload is invisible
        but billed."""
        cutoff = initiated_before
        aborted = 0
        try:
            pages = self._client.get_paginator("list_multipart_uploads").paginate(Bucket=self.url.bucket,
                                                                                  Prefix=self.url.prefix + under)
            for page in pages:
                if cutoff is None:  # this answer's Date has set the clock
                    cutoff = dt.datetime.fromtimestamp(self._clock.now() + 1, dt.UTC)
                for upload in page.get("Uploads", ()):
                    if upload["Initiated"] >= cutoff:
                        continue
                    try:
                        self._client.abort_multipart_upload(Bucket=self.url.bucket, Key=upload["Key"],
                                                            UploadId=upload["UploadId"])
                    except botocore.exceptions.ClientError as exc:
                        if _code(exc) != "NoSuchUpload":  # finished or aborted meanwhile
                            raise
                        continue
                    aborted += 1
        except _BOTO_ERRORS as exc:
            where = self.url.prefix + under or "(all)"
            raise self._error(exc, "cleaning up the incomplete uploads of", where) from None
        return aborted

    # --- errors

    def _error(self, exc: BaseException, doing: str, name: str | None = None) -> RelayError:
        """The relay's kind of error for a boto3 failure, in words a DBA reads, without secrets."""
        what = f"object store {self.where}: {doing}" + (f" {name}" if name else "")
        code = _code(exc)
        if isinstance(exc, botocore.exceptions.ClientError):
            error = exc.response.get("Error", {})
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code.isdigit():  # an answer without a body (HEAD): only the HTTP status tells
                said = f"HTTP {status} {error.get('Message') or ''}".strip()
            else:
                said = self._secrets.scrub(f"{code}: {error.get('Message') or 'no message'} (HTTP {status})")
            if code in _MISSING:
                return ObjectMissing(f"{what}: no such object")
            if code in _NO_BUCKET:
                return StoreAccessError(f"{what}: bucket '{self.url.bucket}' does not exist ({said})")
            skewed = self._skew(code, error)
            if skewed is not None:
                return StoreClockSkewed(f"{what}: refused, {skewed}: S3 refuses a request dated more than "
                                        f"{S3_MAX_SKEW_SECONDS / 60:.0f} minutes off its own clock; set this host's "
                                        f"clock right (NTP), the archive goes on by itself once it is ({said})")
            if code in _ACCESS or status in (401, 403):
                return StoreAccessError(f"{what}: refused, check the credentials and the bucket's permissions "
                                        f"({said})")
            if code in _RETRYABLE or status >= 500 or status == 429:
                return StoreUnavailable(f"{what}: the store failed ({said}); {_LATER}")
            return StoreAccessError(f"{what}: the store refused the request ({said})")
        if isinstance(exc, botocore.exceptions.SSLError):
            return StoreAccessError(f"{what}: TLS failed ({self._secrets.scrub(str(exc))}); check the endpoint's "
                                    "certificate, or give its CA as ca_bundle")
        if isinstance(exc, (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError)):
            return StoreAccessError(f"{what}: no credentials found (environment, shared credentials file, "
                                    "profile or key files)")
        if isinstance(exc, _UNREACHABLE):
            return StoreUnavailable(f"{what}: the store is unreachable ({self._secrets.scrub(str(exc))}); {_LATER}")
        return StoreUnavailable(f"{what}: {type(exc).__name__}: {self._secrets.scrub(str(exc))}; {_LATER}")

    def _skew(self, code: str, error: Mapping[str, object]) -> str | None:
        """How far off this host's clock is, if that is why the store refused: it says so
        (RequestTimeTooSkewed, with both times), or it answered without a body (a HEAD's 403) while
        the clocks are further apart than S3 allows."""
        offset = self._clock.offset()
        if code == "RequestTimeTooSkewed":
            told = skew_from_error(error)
            offset = told if told is not None else offset
            return "this host's clock is too far off the store's" if offset is None else describe_offset(offset)
        if code in ("403", "Forbidden") and offset is not None and abs(offset) > S3_MAX_SKEW_SECONDS:
            return describe_offset(offset)
        return None


def _parts(source: Iterator[bytes | bytearray | memoryview], part_size: int) -> Iterator[bytes]:
    """The bodies of a multipart upload: ``source``'s chunks joined into parts of at least
    ``part_size`` bytes (a part ends with the chunk that fills it, so each byte is copied once),
    the last one shorter (or the only one, empty, for an empty source)."""
    pending: list[bytes | bytearray | memoryview] = []
    size = 0
    sent = False
    for chunk in source:
        pending.append(chunk)
        size += len(chunk)
        if size >= part_size:
            yield b"".join(pending)
            pending, size, sent = [], 0, True
    if pending or not sent:
        yield b"".join(pending)


class _PartUploads:
    """The parts of one multipart upload, up to ``upload_concurrency`` in flight at once (each on
    its own connection of the client's pool): a store's latency per part, not its bandwidth, is
    what bounds one PUT after another.  Memory: at most that many parts, plus the one being cut."""

    def __init__(self, client: S3Client, bucket: str, key: str, upload_id: str, config: StoreConfig,
                 with_checksums: bool) -> None:
        self._client, self._bucket, self._key, self._upload_id = client, bucket, key, upload_id
        self._with_checksums = with_checksums
        self._part_size = config.part_size
        self._window = config.upload_concurrency
        self._pool = ThreadPoolExecutor(max_workers=self._window, thread_name_prefix="archive-part")
        self._in_flight: collections.deque[Future[CompletedPartTypeDef]] = collections.deque()
        self.sent: list[CompletedPartTypeDef] = []
        self.size = 0
        self.crc32 = 0  # of the parts so far, in order

    def send(self, body: bytes) -> None:
        number = len(self.sent) + len(self._in_flight) + 1
        if number > MAX_PARTS:
            raise StoreAccessError(f"object store: {self._key} needs more than {MAX_PARTS} parts of "
                                   f"{self._part_size} bytes; raise the part size")
        while len(self._in_flight) >= self._window:
            self.sent.append(self._in_flight.popleft().result())
        self._in_flight.append(self._pool.submit(self._upload, number, body))
        self.size += len(body)
        self.crc32 = zlib.crc32(body, self.crc32)

    def completed(self) -> list[CompletedPartTypeDef]:
        while self._in_flight:
            self.sent.append(self._in_flight.popleft().result())
        return self.sent

    def checksums(self) -> frozenset[str]:
        """What the store may say the object's checksum is (PutResult.checksums), once completed."""
        if not self._with_checksums:
            return frozenset()
        part_crc32s = b"".join(base64.b64decode(part["ChecksumCRC32"]) for part in self.sent)
        composite = _checksum_text(zlib.crc32(part_crc32s))
        return frozenset({_checksum_text(self.crc32), composite, f"{composite}-{len(self.sent)}"})

    def cancel(self) -> None:
        """Stop what has not started and wait for what has."""
        for future in self._in_flight:
            future.cancel()
        self._pool.shutdown(wait=True)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _upload(self, number: int, body: bytes) -> CompletedPartTypeDef:
        if not self._with_checksums:
            answer = self._client.upload_part(Bucket=self._bucket, Key=self._key, UploadId=self._upload_id,
                                              PartNumber=number, Body=body)
            return {"PartNumber": number, "ETag": answer["ETag"]}
        checksum = _base64(zlib.crc32(body))  # here, on the part's own thread
        answer = self._client.upload_part(Bucket=self._bucket, Key=self._key, UploadId=self._upload_id,
                                          PartNumber=number, Body=body, ChecksumAlgorithm="CRC32",
                                          ChecksumCRC32=checksum)
        return {"PartNumber": number, "ETag": answer["ETag"], "ChecksumCRC32": checksum}


def _base64(crc32: int) -> str:
    """A CRC32 as S3 writes it."""
    return base64.b64encode(crc32.to_bytes(4, "big")).decode()


def _checksum_text(crc32: int) -> str:
    """A CRC32 as ``ObjectHead.checksum`` writes it."""
    return f"CRC32:{_base64(crc32)}"


def _botocore_problem(exc: Exception) -> str:
    """A botocore error before any request, in one line: its message where that names only a profile, a
    variable, a file or a value of the configuration; else its kind (a credential_process's error, say,
    may hold what it printed)."""
    safe = (botocore.exceptions.ProfileNotFound, botocore.exceptions.PartialCredentialsError,
            botocore.exceptions.ConfigParseError, botocore.exceptions.InvalidRegionError,
            botocore.exceptions.NoRegionError, botocore.exceptions.ConfigNotFound, ValueError)
    if isinstance(exc, safe):
        return f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    return f"{type(exc).__name__} (see the AWS configuration and credentials)"


def _code(exc: BaseException) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def open_store(config: StoreConfig) -> ObjectStore:
    """The store of a configuration (S3 and S3-compatible stores, the only kind so far)."""
    return S3Store(config)
