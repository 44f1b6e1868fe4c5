"""CHANGE MASTER TO on the relay: a new upstream vetted before the relay follows it, and kept in
data_dir over the YAML's (storage/upstreamfile.py) until RESET SLAVE or an edit of the YAML's upstream.

The vetting is the candidate check of ``upstream.hosts`` (relay/candidates.py, through choosing.py)
on one connection that is closed again: its server_id is not the relay's, its history holds what the
relay stored (not behind, not diverged), and with MASTER_USE_GTID=no it serves the stored files
(checked against its SHOW BINARY LOGS as a resumed dump would be).  It need not be writable: a
replica may be the relay's upstream on purpose.  The relay's storage is not touched.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import replace
from pathlib import Path

import trio

from ..candidates import (
    CandidateFacts,
    CandidateRefused,
    CandidateUnusable,
    check_resume_file,
    check_server_id,
    follows_by_position,
)
from ..errors import Refusal
from ..protocol.codes import ER_CONNECT_TO_MASTER, ER_SLAVE_FATAL_ERROR
from ..storage import upstreamfile
from ..storage.gtidindex import GtidIndex
from ..storage.relaylog import RelayLog
from .choosing import candidate_facts, server_id_of, vet_candidate
from .connection import connect
from .errors import RETRYABLE, describe
from .settings import UpstreamSettings

log = logging.getLogger("relay.upstream")  # one logger for the upstream side, as before its split


class UpstreamRefused(Refusal):
    """CHANGE MASTER TO's upstream cannot be followed; ``code`` and ``sqlstate`` are the ERR's: what
    a MariaDB replica's IO thread reports for the same trouble (1218 when it cannot connect or log
    in, 1593 for a master it must not follow, as for one with the replica's own server_id)."""

    def __init__(self, code: int, message: str, sqlstate: str = "HY000") -> None:
        super().__init__(message)
        self.code = code
        self.sqlstate = sqlstate


async def vet_new_upstream(settings: UpstreamSettings, relay_log: RelayLog, gtid_index: GtidIndex) -> CandidateFacts:
    """The facts of the one upstream ``settings`` name, once it passed the checks; UpstreamRefused
    if it cannot be reached or followed."""
    target = f"'{settings.user}@{settings.host}:{settings.port}'"
    try:
        return await _vet(settings, relay_log, gtid_index)
    except (CandidateRefused, CandidateUnusable) as refusal:
        raise UpstreamRefused(ER_SLAVE_FATAL_ERROR, f"Fatal error: {target} cannot be followed: {refusal}") from None
    except RETRYABLE as exc:
        raise UpstreamRefused(ER_CONNECT_TO_MASTER, f"Error connecting to master {target}: {describe(exc)}",
                              "08S01") from None


async def _vet(settings: UpstreamSettings, relay_log: RelayLog, gtid_index: GtidIndex) -> CandidateFacts:
    conn = await connect(settings)
    try:
        server_id = await server_id_of(conn)
        check_server_id(server_id, settings.relay_server_id)
        facts = await candidate_facts(conn, server_id)
        vet_candidate(facts, settings, relay_log, gtid_index)
        resume = relay_log.resume_point()
        own = relay_log.state.own_files_from is not None
        if resume.file is not None and not own and follows_by_position(facts, resume.origin_server_id):
            rows = await conn.rows("SHOW BINARY LOGS")
            check_resume_file({name: int(size or 0) for name, size, *_ in rows if name is not None},
                              resume.file, resume.position)
        return facts
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(conn.stream)


def yaml_fingerprint(settings: UpstreamSettings) -> str:
    """What identifies the YAML's upstream: its host and port (or candidates) and user.  A changed
    password or TLS option alone keeps a CHANGE MASTER in force (it carries its own)."""
    what = [settings.host, settings.port, [[c.host, c.port] for c in settings.candidates], settings.user]
    return hashlib.sha256(json.dumps(what).encode()).hexdigest()[:16]


def saved_or_yaml(yaml: UpstreamSettings, data_dir: Path) -> UpstreamSettings:
    """The upstream to follow at start: the one CHANGE MASTER TO saved in data_dir while the YAML's
    upstream is the one it overrode; else the YAML's (a saved one the YAML has moved away from is
    removed, and the log says so)."""
    saved = upstreamfile.read_saved_upstream(data_dir)
    if saved is None:
        return yaml
    if saved.yaml_upstream != yaml_fingerprint(yaml):
        upstreamfile.forget_upstream(data_dir)
        log.warning("upstream: the YAML's upstream changed since CHANGE MASTER TO chose %s@%s:%d; following "
                    "the YAML's (the saved one is removed)", saved.user, saved.host, saved.port)
        return yaml
    return replace(yaml, host=saved.host, port=saved.port, candidates=(), user=saved.user, password=saved.password,
                   ssl_mode=saved.ssl_mode, ssl_ca=saved.ssl_ca, ssl_cert=saved.ssl_cert, ssl_key=saved.ssl_key,
                   use_gtid=saved.use_gtid, repointed=True)


def save_upstream(settings: UpstreamSettings, yaml: UpstreamSettings, data_dir: Path) -> None:
    """Keep ``settings`` (the upstream CHANGE MASTER TO chose over ``yaml``) in data_dir."""
    upstreamfile.save_upstream(data_dir, upstreamfile.SavedUpstream(
        host=settings.host, port=settings.port, user=settings.user, password=settings.password,
        ssl_mode=settings.ssl_mode, ssl_ca=settings.ssl_ca, ssl_cert=settings.ssl_cert, ssl_key=settings.ssl_key,
        use_gtid=settings.use_gtid, yaml_upstream=yaml_fingerprint(yaml), changed_at=time.time()))


def forget_upstream(data_dir: Path) -> bool:
    """RESET SLAVE: no saved upstream any more; False if there was none."""
    return upstreamfile.forget_upstream(data_dir)
