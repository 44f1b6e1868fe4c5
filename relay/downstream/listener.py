"""The downstream listener: accepts replicas, enforces max_connections, runs sessions."""

from __future__ import annotations

import functools
import itertools
import logging
import os
import ssl
import uuid
from collections.abc import Callable
from pathlib import Path

import trio

from ..binlog import events as ev
from ..config import Config
from ..gtid.gtid import format_gtid_position
from ..protocol import auth
from ..protocol import server as proto
from ..protocol.codes import ER_CON_COUNT_ERROR
from ..storage.gtidindex import GtidIndex, MysqlGtidIndex
from ..storage.relaylog import RelayLog
from ..storage.retention import RetentionKeeper
from ..trio_run import open_listeners
from . import queries
from .binlogevents import binlog_events
from .context import SessionContext
from .control import ControlHandler, UpstreamControl
from .purge import PurgeHandler
from .registry import Registry
from .session import handle_connection
from .statusfacts import StatusFacts

log = logging.getLogger(__name__)

DEFAULT_VERSION = "5.5.5-10.11.0-MariaDB-log"


def user_directory(config: Config) -> Callable[[str], proto.Credentials | None]:
    credentials = {user.name: proto.Credentials(user.native_hash(), user.caching_sha2_hash(), user.ed25519_key())
                   for user in config.users}
    return credentials.get


def tls_context(config: Config) -> ssl.SSLContext | None:
    tls = config.listen.ssl
    if not tls.cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls.cert, tls.key)
    return context


RSA_PRIVATE_KEY, RSA_PUBLIC_KEY = "rsa_private_key.pem", "rsa_public_key.pem"


def rsa_key_pair(data_dir: Path) -> tuple[bytes, bytes]:
    """The key pair caching_sha2_password clients encrypt their password with when they have no
    TLS, kept in data_dir (made on the first start, as MySQL's auto-generated pair)."""
    private, public = data_dir / RSA_PRIVATE_KEY, data_dir / RSA_PUBLIC_KEY
    if not (private.exists() and public.exists()):
        private_pem, public_pem = auth.new_rsa_key_pair()
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(private_pem)
        public.write_bytes(public_pem)
    return private.read_bytes(), public.read_bytes()


class Downstream:
    def __init__(self, config: Config, relay_log: RelayLog, upstream: UpstreamControl,
                 registry: Registry, retention: RetentionKeeper) -> None:
        self.config = config
        self.relay_log = relay_log
        self.upstream_status = upstream.status
        self.registry = registry
        self.port: int | None = None
        self.active_connections = 0
        connection_ids = itertools.count(1)
        admins = {user.name for user in config.users if user.admin}
        self.gtid_index = GtidIndex(relay_log)
        self.mysql_gtid_index = MysqlGtidIndex(relay_log)
        self.context = SessionContext(
            relay_log=relay_log, registry=registry, relay_server_id=config.server_id,
            ignore_server_ids=frozenset(config.upstream.ignore_server_ids),
            lookup_user=user_directory(config), facts=self.facts,
            handshake_timeout=config.listen.handshake_timeout, tls_context=tls_context(config),
            tls_required=config.listen.ssl.require, next_connection_id=lambda: next(connection_ids),
            gtid_index=self.gtid_index, mysql_gtid_index=self.mysql_gtid_index,
            purge=PurgeHandler(retention, lambda name: name in admins),
            control=ControlHandler(upstream, lambda name: name in admins),
            wait_for_replica_acks=config.semi_sync.wait_for_replicas > 0, max_packet=config.listen.max_packet,
            rsa_key_pair=rsa_key_pair(relay_log.data_dir))
        self._uuid = str(uuid.uuid5(uuid.NAMESPACE_OID, f"binlog-relay-server-{config.server_id}"))
        self.status_facts = StatusFacts(config, relay_log, upstream, registry, self.gtid_index,
                                        self.mysql_gtid_index, self._is_mariadb)

    def _is_mariadb(self) -> bool:
        return "mariadb" in (self.relay_log.state.upstream_version or DEFAULT_VERSION).lower()

    def facts(self) -> queries.ServerFacts:
        version = self.relay_log.state.upstream_version or DEFAULT_VERSION
        alg = self.upstream_status.checksum_alg
        checksum = "NONE" if alg == ev.CHECKSUM_OFF else "CRC32"
        return queries.ServerFacts(
            version=version, server_id=self.config.server_id, server_uuid=self._uuid,
            binlog_checksum=checksum, is_mariadb=self._is_mariadb(), gtid_domain_id=0,
            master_status=self._master_status, binary_logs=self._binary_logs,
            slave_hosts=lambda: self.registry.slave_hosts(self.config.server_id),
            binlog_gtid_pos=self._binlog_gtid_pos,
            gtid_binlog_pos=lambda: format_gtid_position(self.gtid_index.current_state()),
            semi_sync_master=self.config.semi_sync.wait_for_replicas > 0,
            mysql_gtid_executed=lambda: str(self.mysql_gtid_index.executed()),
            mysql_gtid_purged=lambda: str(self.mysql_gtid_index.purged()),
            binlog_events=functools.partial(binlog_events, self.relay_log),
            replica_status=self.status_facts.replica, status_figures=self.status_facts.figures)

    def _binlog_gtid_pos(self, name: str, position: int) -> str | None:
        if name not in self.relay_log.files:
            return None
        return format_gtid_position(self.gtid_index.position_at(name, position))

    def _master_status(self) -> tuple[str, int, str]:
        """File, position and (a MySQL-flavoured history's) executed GTID set."""
        committed = self.relay_log.committed
        if committed is None:
            return "", 0, ""
        executed = "" if self._is_mariadb() else str(self.mysql_gtid_index.executed())
        return committed[0], committed[1], executed

    def _binary_logs(self) -> list[tuple[str, int]]:
        return [(name, self.relay_log.file_end(name)) for name in list(self.relay_log.served_files())]

    async def serve(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await open_listeners("listen", self.config.listen.host, self.config.listen.port)
        self.port = listeners[0].socket.getsockname()[1]
        log.info("listening for replicas on %s:%d", self.config.listen.host, self.port)
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.SocketStream) -> None:
        try:
            host, port = stream.socket.getpeername()[:2]
        except OSError:  # gone before we looked: nothing to serve, nothing to tell
            await trio.aclose_forcefully(stream)
            return
        peer = f"{host}:{port}"
        if self.active_connections >= self.config.listen.max_connections:
            log.warning("downstream %s: refused, %d connections already", peer, self.active_connections)
            data = proto.ServerConnection.refusal_before_greeting(ER_CON_COUNT_ERROR, "Too many connections", "08004")
            try:
                await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # a refused client that already left must not end the listener
            finally:
                await trio.aclose_forcefully(stream)
            return
        self.active_connections += 1
        try:
            await handle_connection(stream, self.context, peer)
        except Exception:  # one session's failure, wherever it happens, must never end the listener
            log.exception("downstream %s: session failed", peer)
        finally:
            self.active_connections -= 1
