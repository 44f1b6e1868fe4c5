"""The live figures SHOW SLAVE STATUS and SHOW STATUS answer with, read from the objects that keep
them (UpstreamStatus, RelayLog, Registry, the configuration) when a client asks: nothing is
counted for them on the way of ingest or serving.  What each column and variable means is decided
by the pure modules replicastatus.py and globalstatus.py."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from ..config import Config
from ..gtid.gtid import format_gtid_position
from ..ingest.lag import caught_up, lag_seconds
from ..replication.translate import TranslatingStream
from ..storage.gtidindex import GtidIndex, MysqlGtidIndex
from ..storage.relaylog import RelayLog
from .control import UpstreamControl
from .globalstatus import StatusFigures
from .registry import Registry
from .replicastatus import ReplicaStatus

_USING_GTID = {"slave_pos": "Slave_Pos", "current_pos": "Current_Pos", "no": "No"}


class StatusFacts:
    def __init__(self, config: Config, relay_log: RelayLog, upstream: UpstreamControl, registry: Registry,
                 gtid_index: GtidIndex, mysql_gtid_index: MysqlGtidIndex, is_mariadb: Callable[[], bool]) -> None:
        self.config = config
        self.relay_log = relay_log
        self.control = upstream
        self.upstream = upstream.status
        self.registry = registry
        self.gtid_index = gtid_index
        self.mysql_gtid_index = mysql_gtid_index
        self.is_mariadb = is_mariadb
        self.started = time.monotonic()

    # ------------------------------------------------------------ SHOW SLAVE STATUS

    def replica(self) -> ReplicaStatus:
        config, status, relay_log = self.config.upstream, self.upstream, self.relay_log
        committed = relay_log.committed or ((config.start.file or "") if config.start else "", 4)
        stream = status.stream
        # while connected, what the primary sent so far; else what the next dump asks for
        received = (stream.file or "", stream.position) if status.connected and stream is not None else committed
        lag = lag_seconds(status, relay_log.committed, time.time())
        effective = self.control.effective()
        failing = not status.connected and status.last_error is not None
        return ReplicaStatus(
            io_running="No" if not effective.running else "Yes" if status.connected else "Connecting",
            sql_running="Yes" if effective.running else "No",
            host=effective.host, user=effective.user, port=effective.port,
            connect_retry=math.ceil(config.reconnect.max_delay),
            read_file=received[0], read_position=received[1], exec_file=committed[0], exec_position=committed[1],
            relay_log_space=sum(self._size(name) for name in list(relay_log.files)),
            seconds_behind=None if math.isnan(lag) else int(lag),
            # not connected: the partial group was cut back, everything received is committed
            caught_up=not status.connected or caught_up(status, relay_log.committed),
            master_server_id=status.server_id or relay_log.state.upstream_server_id or 0,
            using_gtid=_USING_GTID[effective.use_gtid] if effective.source == "CHANGE MASTER"
            else "Slave_Pos" if isinstance(stream, TranslatingStream) or relay_log.state.own_files_from else "No",
            gtid_position=self._gtid_position(),
            ignore_server_ids=tuple(config.ignore_server_ids),
            last_io_errno=status.last_errno if failing else 0,
            last_io_error=status.last_error or "" if failing else "",
            last_io_error_time=status.last_error_time if failing else None,
            ssl=effective.ssl, ssl_ca=effective.ssl_ca or "", ssl_cert=config.ssl.cert or "",
            ssl_key=config.ssl.key or "", ssl_verify_server_cert=effective.ssl_verify_server_cert,
            received_events=sum(stream.event_counts) if stream is not None else 0,
            received_heartbeats=sum(stream.heartbeats.values()) if stream is not None else 0,
            heartbeat_period=config.heartbeat_period, waiting_for_space=status.disk_full,
            reconnecting=stream is not None)  # a stream is kept from the last dump that started

    def _gtid_position(self) -> str:
        if self.is_mariadb():
            return format_gtid_position(self.gtid_index.current_state())
        return str(self.mysql_gtid_index.executed())

    def _size(self, name: str) -> int:
        try:
            return self.relay_log.file_end(name)
        except OSError:
            return 0

    # ------------------------------------------------------------ SHOW STATUS

    def figures(self) -> StatusFigures:
        status, registry = self.upstream, self.registry
        stream = status.stream
        return StatusFigures(
            uptime=int(time.monotonic() - self.started),
            threads_connected=registry.sessions(),
            threads_running=len(registry.all_dumps) + 1,  # the dumps, and the session asking
            connections=registry.connections, max_used_connections=registry.max_used_connections,
            aborted_connects=registry.auth_failures + registry.protocol_errors.get("handshake_timeout", 0),
            slave_running=status.connected, slaves_connected=len(registry.slave_hosts(0)),
            semi_sync_slave=status.semi_sync and status.connected,
            semi_sync_master=self.config.semi_sync.wait_for_replicas > 0,
            semi_sync_master_clients=sum(1 for dump in registry.all_dumps if dump.semi_sync),
            received_heartbeats=sum(stream.heartbeats.values()) if stream is not None else 0,
            heartbeat_period=self.config.upstream.heartbeat_period,
            binlog_bytes_written=self.relay_log.bytes_written,
            bytes_received=registry.network_bytes_received, bytes_sent=registry.network_bytes_sent,
            questions=registry.questions, commands=dict(registry.commands))
