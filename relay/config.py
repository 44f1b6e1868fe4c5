"""Configuration: a YAML file loaded into frozen dataclasses.

    config = load_config("relay.yaml")          # raises ConfigError listing every problem
    config.upstream.password.reveal()           # passwords are Secret: '***' in repr/str

The dataclasses below *are* the relay's schema: every key is a dataclass field whose metadata
holds its validator and its documentation (see ``iter_options()``, used to generate the README's
reference table); the machinery that reads them is relay/schema.py.  Errors name the key path
(``upstream.port: expected an integer, got 'abc'``) and are all collected in one pass.

Environment overrides: ``BINLOG_RELAY_<PATH>`` sets the scalar key at PATH (the dotted key path
upper-cased, ``.`` -> ``_``), e.g. ``BINLOG_RELAY_UPSTREAM_PASSWORD``, ``BINLOG_RELAY_LISTEN_PORT``.
The value is read as a YAML scalar and then checked like the file's value; keys that hold strings
(hosts, paths, passwords, enums) take the text verbatim, list keys take comma-separated values,
and an empty value means null (the key's default).  Setting ``password`` from the environment
drops a ``password_file`` given in the file, and vice versa.  ``users`` cannot be overridden,
but each user's password can, the same way: ``BINLOG_RELAY_USERS_<NAME>_PASSWORD[_FILE]``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from .binlog.names import BINLOG_NAME
from .errors import InputError
from .protocol.auth import ed25519_key_of, native_hash_of, native_password_hash, sha2_hash_of
from .schema import (
    INVALID,
    Bool,
    Choice,
    ConfigError,
    Duration,
    Int,
    IntList,
    Invalid,
    Kind,
    ListOf,
    OptionDoc,
    Problems,
    Report,
    Schema,
    Seconds,
    Secret,
    SecretStr,
    Section,
    SectionList,
    Size,
    Str,
    opt,
    read_secret_file,
    section,
    valid,
)

__all__ = [
    "ENV_PREFIX",
    "Config",
    "ConfigError",
    "ListenConfig",
    "ListenSSL",
    "LoggingConfig",
    "MetricsConfig",
    "OptionDoc",
    "ReconnectConfig",
    "RetentionConfig",
    "Secret",
    "StartPosition",
    "StorageConfig",
    "UpstreamConfig",
    "UpstreamSSL",
    "UserConfig",
    "iter_options",
    "load_config",
    "native_password_hash",
    "parse_config",
]

ENV_PREFIX = "BINLOG_RELAY_"
MAX_UINT32 = 2**32 - 1
MIN_WRITER_LEASE = 4  # seconds: the archive writer renews its record every quarter of archive.writer_lease


# --------------------------------------------------------------------------------------------
# A kind of the relay's own.
# --------------------------------------------------------------------------------------------


class _PasswordHash(Kind):
    """A password hash as stored in mysql.user: mysql_native_password's '*' + 40 hex digits, or
    ed25519's 43 base64 characters (its public key).  The form decides the account's plugin."""

    label = "'*' + 40 hex digits, or 43 base64 characters (ed25519)"
    env_verbatim = True
    _FORM = re.compile(r"\*[0-9A-Fa-f]{40}")

    def parse(self, value: object) -> str:
        # Equivalent to a password for offline guessing, so never echoed either.
        if not isinstance(value, str):
            raise Invalid("expected a string")
        if self._FORM.fullmatch(value):
            return value.upper()
        if ed25519_key_of(value) is not None:
            return value[:43]  # base64 is case-sensitive; the padding '=' is optional, as MariaDB drops it
        raise Invalid("expected '*' followed by 40 hex digits (the form PASSWORD() returns), or the 43 base64 "
                      "characters of an ed25519 public key (what mysql.user keeps for ed25519)")


# --------------------------------------------------------------------------------------------
# The schema.  kw_only so required and defaulted keys can stay in their natural order.
# --------------------------------------------------------------------------------------------



@dataclass(frozen=True, kw_only=True)
class StartPosition:
    file: str | None = opt(Str("binlog file name", BINLOG_NAME, "a binlog file name like 'mysql-bin.000001'"),
                            "Binlog file to start from, e.g. mysql-bin.000001 (or give gtid).", None, nullable=True)
    gtid: str | None = opt(Str("MariaDB GTID", r"\d{1,10}-\d{1,10}-\d{1,20}", "a MariaDB GTID like '0-1-42'"),
                            "Instead of file: a MariaDB GTID (domain-server-seq_no); the relay starts with the "
                            "primary's binlog file that holds it, stored whole from its first event.", None,
                            nullable=True)
    position: int = opt(Int(4, 4), "Must be 4: stored files are whole copies of the primary's, "
                         "from their first event.", 4)


@dataclass(frozen=True, kw_only=True)
class ReconnectConfig:
    initial_delay: float = opt(Seconds(), "First wait before reconnecting to the primary.", 0.5)
    max_delay: float = opt(Seconds(), "Cap of the doubling reconnect delay (>= initial_delay).", 30.0)


@dataclass(frozen=True, kw_only=True)
class UpstreamHost:
    host: str = opt(Str("host"), "Candidate primary's host name or IP address.")
    port: int = opt(Int(1, 65535), "Its port.", 3306)


@dataclass(frozen=True, kw_only=True)
class UpstreamSSL:
    mode: str = opt(Choice("disabled", "preferred", "required", "verify_ca", "verify_identity"),
                     "TLS to the primary; verify_ca/verify_identity need ca.", "disabled")
    ca: str | None = opt(Str("path"), "CA bundle (PEM) to verify the primary's certificate.", None, nullable=True)
    cert: str | None = opt(Str("path"), "Client certificate (PEM); needs key.", None, nullable=True)
    key: str | None = opt(Str("path"), "Client private key (PEM); needs cert.", None, nullable=True)


@dataclass(frozen=True, kw_only=True)
class UpstreamConfig:
    host: str | None = opt(Str("host"), "Primary's host name or IP address (or give hosts).", None,
                            nullable=True)
    port: int = opt(Int(1, 65535), "Primary's port.", 3306)
    hosts: tuple[UpstreamHost, ...] = opt(
        SectionList(UpstreamHost), "Candidate primaries in order of preference, instead of host/port: the "
        "relay follows the first writable one whose history holds what it stored, and moves on at a failover.", ())
    user: str = opt(Str(), "Replication user on the primary.")
    password: Secret = opt(SecretStr(), "Its password (or give password_file; neither = empty password).",
                            Secret(""), excludes="password_file")
    password_file: str | None = opt(Str("path"), "File holding the password, read at load time "
                                     "(one trailing newline stripped).", None, nullable=True,
                                     excludes="password")
    start: StartPosition | None = opt(Section(StartPosition),
                                       "Where a fresh data_dir begins; default: the primary's first binlog.",
                                       None, nullable=True)
    ignore_server_ids: tuple[int, ...] = opt(IntList(Int(0, MAX_UINT32)),
                                              "Groups written by these server ids are not served to "
                                              "replicas (loop filter; storage keeps them).", ())
    heartbeat_period: float = opt(Seconds(4294967), "Heartbeat interval the primary is asked for.", 15.0)
    connect_timeout: float = opt(Seconds(), "Timeout for connecting and logging in.", 10.0)
    behind_wait: float = opt(Seconds(), "With hosts: how long a candidate "
                              "refused as behind is waited for (it may be catching up) before the candidates after "
                              "it are followed.", 30.0)
    unready_after: float = opt(Seconds(), "How long ingest may fail (reconnecting with back-off) before /readyz "
                                "answers 503.", 60.0)
    reconnect: ReconnectConfig = section(ReconnectConfig, "Reconnect back-off.")
    ssl: UpstreamSSL = section(UpstreamSSL, "TLS to the primary.")
    server_public_key: str | None = opt(Str("path"), "The primary's RSA public key (PEM) for caching_sha2_password "
                                         "without TLS (MySQL 8); without it the key is asked of the primary.",
                                         None, nullable=True)
    semi_sync: bool = opt(Bool(), "Be a semi-sync replica of a primary that runs semi-sync, acknowledging each "
                           "transaction once it is on the relay's disk (needs storage.sync: commit).", False)


@dataclass(frozen=True, kw_only=True)
class ListenSSL:
    cert: str | None = opt(Str("path"), "Server certificate (PEM); needs key.", None, nullable=True)
    key: str | None = opt(Str("path"), "Server private key (PEM); needs cert.", None, nullable=True)
    require: bool = opt(Bool(), "Refuse clients that do not use TLS (needs cert and key).", False)


@dataclass(frozen=True, kw_only=True)
class ListenConfig:
    host: str = opt(Str("host"), "Address replicas connect to.", "0.0.0.0")
    port: int = opt(Int(0, 65535), "Port replicas connect to (0 = any free port).", 3306)
    max_connections: int = opt(Int(1), "Most downstream sessions at once.", 1000)
    handshake_timeout: float = opt(Seconds(), "Time a client has to log in.", 10.0)
    max_packet: int = opt(Size(), "Largest packet a logged-in client may send (before the login: 16K); "
                           "over it the client gets ERR 1153 and is disconnected.", 16 << 20)
    ssl: ListenSSL = section(ListenSSL, "TLS for replicas.")


@dataclass(frozen=True, kw_only=True)
class UserConfig:
    name: str = opt(Str(), "User name a replica logs in with.")
    password: Secret | None = opt(SecretStr(), "Its password (or give password_hash or password_file).",
                                   None, nullable=True)
    # Not a Secret (it is what mysql.user shows), but kept out of repr all the same.
    password_hash: str | None = opt(_PasswordHash(), "mysql_native_password hash ('*' + 40 hex digits) or ed25519 "
                                     "hash (43 base64 characters: the user logs in with client_ed25519 only); "
                                     "`binlog-relay hash-password [--plugin ed25519]` prints either.",
                                     None, nullable=True, repr=False)
    password_file: str | None = opt(Str("path"), "File holding the password, read at load time (one trailing "
                                     "newline stripped). From the environment: BINLOG_RELAY_USERS_<NAME>_PASSWORD or "
                                     "_PASSWORD_FILE (NAME upper-cased, other characters than A-Z and 0-9 as _).",
                                     None, nullable=True)
    admin: bool = opt(Bool(), "May run PURGE BINARY LOGS (the BINLOG ADMIN privilege of a primary) and STOP/START "
                       "SLAVE, CHANGE MASTER TO and RESET SLAVE (a replica's REPLICATION SLAVE ADMIN and RELOAD).",
                       False)

    def native_hash(self) -> bytes | None:
        """SHA1(SHA1(password)), the 20 bytes mysql_native_password checks against; b"" = no password;
        None for an ed25519 user."""
        if self.password_hash is not None:
            return bytes.fromhex(self.password_hash[1:]) if self.password_hash.startswith("*") else None
        if self.password is None:
            return b""
        return native_hash_of(self.password.reveal().encode("utf-8"))

    def caching_sha2_hash(self) -> bytes | None:
        """SHA256(SHA256(password)) for caching_sha2_password; None if only a native hash was given."""
        if self.password is None:
            return None
        return sha2_hash_of(self.password.reveal().encode("utf-8"))

    def ed25519_key(self) -> bytes | None:
        """The public key of an ed25519 user (password_hash in that form), None for the others."""
        if self.password_hash is None or self.password_hash.startswith("*"):
            return None
        return ed25519_key_of(self.password_hash)


@dataclass(frozen=True, kw_only=True)
class MetricsConfig:
    host: str = opt(Str("host"), "Address of the Prometheus /metrics endpoint.", "0.0.0.0")
    port: int = opt(Int(0, 65535), "Its port (0 = any free port).", 9104)
    enabled: bool = opt(Bool(), "Serve metrics at all.", True)


@dataclass(frozen=True, kw_only=True)
class RetentionConfig:
    max_size: int | None = opt(Size(), "Purge oldest binlogs beyond this total size (null = unlimited).",
                                None, nullable=True)
    max_age: int | None = opt(Duration(), "Purge binlogs older than this, in seconds (null = unlimited).",
                               None, nullable=True)
    min_files: int = opt(Int(1), "Always keep at least this many binlog files.", 2)
    replica_grace: int = opt(Duration(allow_zero=True),
                             "Keep, for this long after a replica was last seen, the files it "
                             "still needs (kept in data_dir across restarts); 0 = only connected replicas.", 3600)


@dataclass(frozen=True, kw_only=True)
class StorageConfig:
    sync: str = opt(Choice("commit", "interval", "none"),
                     "fsync policy: commit = before a transaction is acknowledged as stored (group commit); "
                     "interval = every sync_interval_ms; none = leave it to the OS.", "commit")
    sync_interval_ms: int = opt(Int(1), "fsync period for sync: interval.", 100)
    index_interval: int = opt(Size(), "Bytes of a stored file between two entries of its index (history-index/): a "
                              "GTID dump, BINLOG_GTID_POS and a search by time or GTID walk at most this much of it.",
                              4 << 20)
    retention: RetentionConfig = section(RetentionConfig, "When old binlog files are purged.")


@dataclass(frozen=True, kw_only=True)
class ArchiveRetentionConfig:
    max_age: int | None = opt(Duration(), "Delete archived files archived longer ago than this (null = keep "
                              "everything).", None, nullable=True)
    max_files: int | None = opt(Int(1), "Keep at most this many archived files, the newest (null = no limit).",
                                None, nullable=True)


@dataclass(frozen=True, kw_only=True)
class ArchiveConfig:
    # URLs are checked by the store's own checks (_check_archive), which never repeat a user:password@
    url: str | None = opt(Str("URL"),
                          "Where closed binlog files are archived (s3://bucket/prefix); null = no archive. With an "
                          "archive a file leaves the local disk only once it is archived and verified there.",
                          None, nullable=True)
    endpoint_url: str | None = opt(Str("URL"),
                                   "The endpoint of an S3-compatible store (MinIO, Ceph RGW, ...); null = AWS S3.",
                                   None, nullable=True)
    region: str | None = opt(Str("region"), "The store's region (null: the AWS configuration's).", None,
                             nullable=True)
    access_key_id_file: str | None = opt(Str("path"), "A file holding the access key id (with "
                                         "secret_access_key_file; both read again every minute, so a key "
                                         "rotated in the files is used without a restart); null = the standard "
                                         "AWS chain: environment, shared credentials file, profile, instance "
                                         "role.", None, nullable=True)
    secret_access_key_file: str | None = opt(Str("path"), "A file holding the secret access key.", None,
                                             nullable=True)
    encryption_key_file: str | None = opt(Str("path"), "A file holding the 256-bit key that wraps each archived "
                                          "file's own AES-256-GCM key (32 raw bytes or 64 hex digits); null = "
                                          "not encrypted.", None, nullable=True)
    old_encryption_key_files: tuple[str, ...] = opt(ListOf(Str("path"), "paths"),
                                                    "Keys of earlier rotations: they open files archived under "
                                                    "them; new files use encryption_key_file.", ())
    compression_level: int = opt(Int(1, 19), "zstd level of the archived objects.", 1)
    verify_uploads: str = opt(Choice("checksum", "read-back"),
                              "How an upload is checked before the file counts as archived: checksum = each part "
                              "sent with its CRC32 and the object's CRC32 as the store keeps it compared with ours "
                              "(one HEAD; read back when the store keeps none); read-back = the whole object read "
                              "back and compared (twice the transfer, for a store that does not check checksums).",
                              "checksum")
    writer_lease: int = opt(Duration(), "Relays of one primary may share an archive: one writes it, renewing its "
                            "record every quarter of this, the others read it (serve its files, purge a local "
                            "file once the archived copy equals it); one of them writes it once the writer has "
                            "been silent this long.", 60)
    retention: ArchiveRetentionConfig = section(ArchiveRetentionConfig, "When archived files are deleted.")


@dataclass(frozen=True, kw_only=True)
class SemiSyncConfig:
    wait_for_replicas: int = opt(Int(0), "With upstream.semi_sync: acknowledge a transaction to the primary only "
                                  "once this many semi-sync replicas of the relay acknowledged it too.", 0)
    replica_timeout: float = opt(Seconds(), "Longest wait for those replicas; past it the relay acknowledges "
                                  "alone until they catch up (as a primary falls back to async).", 10.0)


@dataclass(frozen=True, kw_only=True)
class LoggingConfig:
    level: str = opt(Choice("DEBUG", "INFO", "WARNING", "ERROR", ignore_case=True), "Log level.", "INFO")
    format: str = opt(Choice("text", "json"), "text for people, json for log shippers.", "text")


@dataclass(frozen=True, kw_only=True)
class Config:
    server_id: int = opt(Int(1, MAX_UINT32), "The relay's own server id (unique in the topology).")
    data_dir: str = opt(Str("path"), "Directory for the relay's binlogs and state.")
    upstream: UpstreamConfig = opt(Section(UpstreamConfig), "The primary to replicate from.")
    listen: ListenConfig = section(ListenConfig, "Where replicas connect.")
    users: tuple[UserConfig, ...] = opt(SectionList(UserConfig), "Who may replicate from the relay.", ())
    metrics: MetricsConfig = section(MetricsConfig, "Prometheus metrics endpoint.")
    storage: StorageConfig = section(StorageConfig, "Binlog storage.")
    semi_sync: SemiSyncConfig = section(SemiSyncConfig, "The semi-sync chain through the relay.")
    archive: ArchiveConfig = section(ArchiveConfig, "The archive of closed binlog files on object storage.")
    logging: LoggingConfig = section(LoggingConfig, "Logging.")


# --------------------------------------------------------------------------------------------
# Cross-key rules.  Each gets the section's raw mapping, its parsed values (possibly INVALID,
# then the rule stays silent: that key already has an error) and a reporter for sub-keys.
# --------------------------------------------------------------------------------------------


def _check_reconnect(raw: Mapping, values: dict, report: Report) -> None:
    initial, maximum = values["initial_delay"], values["max_delay"]
    if valid(initial, maximum) and maximum < initial:
        report("max_delay", f"must be at least initial_delay ({initial}), got {maximum}")


def _check_start(raw: Mapping, values: dict, report: Report) -> None:
    has_file, has_gtid = raw.get("file") is not None, raw.get("gtid") is not None
    if has_file and has_gtid:
        report("gtid", "give file or gtid, not both")
        values["gtid"] = INVALID
    elif not has_file and not has_gtid:
        report("file", "required key is missing (or give gtid, a MariaDB GTID to start at)")
        values["file"] = INVALID


def _check_cert_pair(values: dict, report: Report) -> None:
    cert, key = values["cert"], values["key"]
    if cert is not None and key is None:
        report("key", "required when cert is given")
    if key is not None and cert is None:
        report("cert", "required when key is given")


def _check_upstream_ssl(raw: Mapping, values: dict, report: Report) -> None:
    _check_cert_pair(values, report)
    mode = values["mode"]
    if mode in ("verify_ca", "verify_identity") and values["ca"] is None:
        report("ca", f"required when mode is {mode}")


def _check_listen_ssl(raw: Mapping, values: dict, report: Report) -> None:
    _check_cert_pair(values, report)
    if values["require"] is True and (values["cert"] is None or values["key"] is None):
        report("require", "needs cert and key")


def _check_upstream(raw: Mapping, values: dict, report: Report) -> None:
    key_path = values.get("server_public_key")
    if key_path is not None and valid(key_path):
        try:
            with open(key_path, "rb") as key_file:
                if b"PUBLIC KEY-----" not in key_file.read(65536):
                    report("server_public_key", f"{key_path} holds no PEM public key")
        except OSError as err:
            report("server_public_key", f"cannot read {key_path!r}: {err.strerror or err}")
    has_host, has_hosts = raw.get("host") is not None, bool(raw.get("hosts"))
    if has_host and has_hosts:
        report("hosts", "give host (one primary) or hosts (candidate primaries), not both")
        values["host"] = INVALID
    elif not has_host and not has_hosts:
        report("host", "required key is missing (or give hosts, the candidate primaries)")
        values["host"] = INVALID
    if raw.get("password") is not None and raw.get("password_file") is not None:
        report("", "give either password or password_file, not both")
        values["password"] = INVALID
        return
    path = values["password_file"]
    if path is not None and valid(path):
        try:
            values["password"] = Secret(read_secret_file(path))
        except Invalid as bad:
            report("password_file", bad.message)
            values["password_file"] = INVALID


def _check_archive(raw: Mapping, values: dict, report: Report) -> None:
    for key in ("url", "endpoint_url", "region"):
        value = values[key]
        if value is not None and valid(value):
            from .archive import store  # boto3: loaded when an archive is configured

            check = {"url": store.StoreURL.parse, "endpoint_url": store.check_endpoint_url,
                     "region": store.check_region}[key]
            try:
                check(value)
            except InputError as bad:  # never repeats a user:password@ (nor does Str: no pattern to fail)
                report(key, str(bad))
                values[key] = INVALID
    lease = values["writer_lease"]
    if valid(lease) and lease < MIN_WRITER_LEASE:
        report("writer_lease", f"must be at least {MIN_WRITER_LEASE} s (the writer renews its record every quarter "
                               f"of it), got {lease}")
    if (values["access_key_id_file"] is None) != (values["secret_access_key_file"] is None):
        report("secret_access_key_file" if values["access_key_id_file"] else "access_key_id_file",
               "give both access_key_id_file and secret_access_key_file, or neither (the AWS chain)")
    for key in ("access_key_id_file", "secret_access_key_file"):
        path = values[key]
        if path is not None and valid(path) and not os.access(path, os.R_OK):
            report(key, f"cannot read {path!r}")
    if values["encryption_key_file"] is None and valid(values["old_encryption_key_files"]) \
            and values["old_encryption_key_files"]:
        # the current key is the first of the keys read: an old one would encrypt the new files
        report("old_encryption_key_files", "given without encryption_key_file: set encryption_key_file to the "
                                           "key that encrypts new files (the old keys only open what they "
                                           "encrypted), or remove old_encryption_key_files")
    paths = [("encryption_key_file", values["encryption_key_file"])]
    if valid(values["old_encryption_key_files"]):
        paths += [(f"old_encryption_key_files[{i}]", path) for i, path in enumerate(values["old_encryption_key_files"])]
    for key, path in paths:
        if path is not None and valid(path):
            from .archive import keys as archive_keys  # cryptography: loaded when a key is configured

            try:
                archive_keys.read_kek(path)
            except InputError as bad:
                report(key, str(bad))


def _check_user(raw: Mapping, values: dict, report: Report) -> None:
    given = [key for key in ("password", "password_hash", "password_file") if raw.get(key) is not None]
    if len(given) > 1:
        report("", f"give one of password, password_hash and password_file, not {' and '.join(given)}")
        values["password"] = INVALID
    elif not given:
        report("", "give password, password_hash or password_file")
        values["password"] = INVALID
    elif given == ["password_file"] and valid(values["password_file"]):
        try:
            values["password"] = Secret(read_secret_file(values["password_file"]))
        except Invalid as bad:
            report("password_file", bad.message)
            values["password_file"] = INVALID


def _check_config(raw: Mapping, values: dict, report: Report) -> None:
    server_id, upstream, users = values["server_id"], values["upstream"], values["users"]
    if valid(server_id, upstream) and server_id in upstream.ignore_server_ids:
        report("upstream.ignore_server_ids", f"contains server_id {server_id}, the relay's own id")
    storage: Any = values.get("storage")
    semi_sync: Any = values.get("semi_sync")
    if valid(upstream, semi_sync) and semi_sync.wait_for_replicas and not upstream.semi_sync:
        report("semi_sync.wait_for_replicas", "needs upstream.semi_sync: true (the relay acknowledges to its "
               "primary only as a semi-sync replica)")
    if valid(upstream, storage) and upstream.semi_sync and storage.sync != "commit":
        report("upstream.semi_sync", f"needs storage.sync: commit (it is {storage.sync}): an acknowledged "
               "transaction must be on disk")
    listen: Any = values.get("listen")
    metrics: Any = values.get("metrics")
    hosts = (listen.host, metrics.host) if valid(listen, metrics) else ()
    # 0.0.0.0 holds the port on every IPv4 address, not on IPv6 ones (the listeners are IPV6_V6ONLY)
    if hosts and metrics.enabled and metrics.port and metrics.port == listen.port \
            and (hosts[0] == hosts[1] or ("0.0.0.0" in hosts and not any(":" in host for host in hosts))):
        report("metrics.port", f"{metrics.port} is listen.port too, on the same address: the relay could not start")
    if valid(users):
        seen: set[str] = set()
        for index, user in enumerate(users):
            if user.name in seen:
                report(f"users[{index}].name", f"duplicate user {user.name!r}")
            seen.add(user.name)


_CHECKS = {
    StartPosition: _check_start,
    ReconnectConfig: _check_reconnect,
    UpstreamSSL: _check_upstream_ssl,
    ListenSSL: _check_listen_ssl,
    UpstreamConfig: _check_upstream,
    UserConfig: _check_user,
    ArchiveConfig: _check_archive,
    Config: _check_config,
}


# --------------------------------------------------------------------------------------------
# Users' passwords from the environment.
# --------------------------------------------------------------------------------------------


# BINLOG_RELAY_USERS_<NAME>_PASSWORD and _PASSWORD_FILE, as BINLOG_RELAY_UPSTREAM_PASSWORD[_FILE].
_USER_PASSWORD_VARIABLE = re.compile(re.escape(ENV_PREFIX) + r"USERS_(.+)_PASSWORD(_FILE)?")


def user_env_name(name: str) -> str:
    """The <NAME> of a user's environment variables: upper case, each character other than a
    letter or digit as '_' (shells and Kubernetes take only those in a variable name)."""
    return re.sub(r"[^A-Z0-9]", "_", name.upper())


def _set_user_password(data: dict, name: str, given: dict[str, tuple[str, str]], problems: Problems) -> None:
    """The password (or password file) of the user whose name gives <NAME>, in place of the
    password, hash or file the configuration gives it; both from the environment is a conflict,
    reported as for the file (a user with password and password_file)."""
    users = data.get("users")
    if not isinstance(users, list):
        users = []
    matches = [(i, u) for i, u in enumerate(users)
               if isinstance(u, dict) and user_env_name(str(u.get("name", ""))) == name]
    variables = " and ".join(variable for variable, _ in given.values())
    if not matches:
        problems.add("", f"{variables}: no user named {name.lower()!r} in users")
        return
    if len(matches) > 1:
        names = " and ".join(repr(str(u.get("name"))) for _, u in matches)
        problems.add("", f"{variables}: users {names} have the same variable name; rename one")
        return
    index, entry = matches[0]
    for key in ("password", "password_hash", "password_file"):
        entry.pop(key, None)
    for key, (variable, value) in given.items():
        entry[key] = value
        problems.env_sources[f"users[{index}].{key}"] = variable


class _UserPasswordsFromEnv:
    """BINLOG_RELAY_USERS_<NAME>_PASSWORD[_FILE]: users cannot be set from the environment, their
    passwords can (a schema.EnvExtension, one per parse)."""

    def __init__(self) -> None:
        self._given: dict[str, dict[str, tuple[str, str]]] = {}  # NAME -> key -> (variable, value)

    def claim(self, variable: str, value: str) -> bool:
        user = _USER_PASSWORD_VARIABLE.fullmatch(variable)
        if user is None:
            return False
        key = "password_file" if user.group(2) else "password"
        self._given.setdefault(user.group(1), {})[key] = (variable, value)
        return True

    def apply(self, data: dict, problems: Problems) -> None:
        for name, given in self._given.items():
            _set_user_password(data, name, given, problems)

    def unknown_reason(self, variable: str) -> str | None:
        if variable == ENV_PREFIX + "USERS" or variable.startswith(ENV_PREFIX + "USERS_"):
            return ("users cannot be set from the environment, but their passwords can: "
                    "BINLOG_RELAY_USERS_<NAME>_PASSWORD or _PASSWORD_FILE")
        return None


# --------------------------------------------------------------------------------------------
# Public entry points.
# --------------------------------------------------------------------------------------------


SCHEMA = Schema(Config, ENV_PREFIX, _CHECKS, _UserPasswordsFromEnv)


def parse_config(data: object, environ: Mapping[str, str] | None = None, source: str = "<string>") -> Config:
    """Validate already-parsed YAML (plus environment overrides) into a Config."""
    return SCHEMA.parse(data, environ, source)


def load_config(path: str | os.PathLike, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate a YAML configuration file; raises ConfigError listing every problem."""
    return SCHEMA.load(path, environ)


def iter_options() -> Iterator[OptionDoc]:
    """Every key of the relay's configuration, sections before their keys (the README's table)."""
    return SCHEMA.options()
