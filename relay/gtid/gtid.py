"""MariaDB GTIDs: 'domain-server-seq' positions (@@gtid_slave_pos, @slave_connect_state) and the
binlog state a primary keeps (one last GTID per domain *and server_id*, as GTID_LIST events list it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import InputError
from ..protocol.codes import ER_DUPLICATE_GTID_DOMAIN, ER_INCORRECT_GTID_STATE
from .hashorder import HashOrder

_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


class GtidError(InputError):
    """A GTID position string a replica sent cannot be parsed; ``code`` and the message are the
    error a MariaDB primary answers a dump with such a @slave_connect_state."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, order=True)
class Gtid:
    domain_id: int
    server_id: int
    seq_no: int

    def __str__(self) -> str:
        return f"{self.domain_id}-{self.server_id}-{self.seq_no}"


def parse_gtid_position(text: str) -> dict[int, Gtid]:
    """'0-1-5,1-2-7' -> {0: Gtid(0,1,5), 1: Gtid(1,2,7)}; one GTID per domain."""
    position: dict[int, Gtid] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        match = _GTID.match(part)
        if not match:
            raise GtidError("Could not parse GTID list", ER_INCORRECT_GTID_STATE)
        gtid = Gtid(*(int(n) for n in match.groups()))
        if gtid.domain_id in position:
            raise GtidError(f"GTID {gtid} and {position[gtid.domain_id]} conflict (duplicate domain id "
                            f"{gtid.domain_id})", ER_DUPLICATE_GTID_DOMAIN)
        position[gtid.domain_id] = gtid
    return position


def format_gtid_position(position: dict[int, Gtid]) -> str:
    return ",".join(str(position[domain]) for domain in sorted(position))


class BinlogState:
    """MariaDB's rpl_binlog_state: per domain, the last seq_no of every server_id that wrote in it,
    and which GTID of the domain was written last.  ``gtid_list`` lists it as a GTID_LIST event
    does: domains and each domain's servers in the order of MariaDB's hashes (hashorder), except
    that a domain's most recent GTID comes last."""

    __slots__ = ("_domains", "_last", "_domain_order", "_server_orders")

    def __init__(self, gtids: Iterable[Gtid] = ()) -> None:
        self._domains: dict[int, dict[int, int]] = {}
        self._last: dict[int, Gtid] = {}
        self._domain_order = HashOrder()
        self._server_orders: dict[int, HashOrder] = {}
        for gtid in gtids:
            self.update(gtid)

    def update(self, gtid: Gtid) -> None:
        domain, server = gtid.domain_id, gtid.server_id
        servers = self._domains.get(domain)
        if servers is None:
            servers = self._domains[domain] = {}
            self._domain_order.insert(domain)
            self._server_orders[domain] = HashOrder()
        if server not in servers:
            self._server_orders[domain].insert(server)
        servers[server] = gtid.seq_no
        self._last[domain] = gtid

    def copy(self) -> BinlogState:
        state = BinlogState()
        state._domains = {domain: dict(servers) for domain, servers in self._domains.items()}
        state._last = dict(self._last)
        state._domain_order = self._domain_order.copy()
        state._server_orders = {domain: order.copy() for domain, order in self._server_orders.items()}
        return state

    def seq_of(self, domain_id: int, server_id: int) -> int | None:
        """The last seq_no ``server_id`` wrote in ``domain_id`` (find_in_binlog_state)."""
        return self._domains.get(domain_id, {}).get(server_id)

    def last(self, domain_id: int) -> Gtid | None:
        """The domain's most recent GTID (lookup_domain_in_binlog_state)."""
        return self._last.get(domain_id)

    def most_recent(self) -> dict[int, Gtid]:
        """One GTID per domain, as @@gtid_binlog_pos shows it."""
        return dict(self._last)

    def gtid_list(self) -> list[Gtid]:
        listed = []
        for domain in self._domain_order.keys():
            last, servers = self._last[domain], self._domains[domain]
            listed += [Gtid(domain, server, servers[server]) for server in self._server_orders[domain].keys()
                       if server != last.server_id]
            listed.append(last)
        return listed

    def __bool__(self) -> bool:
        return bool(self._last)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BinlogState) and self.gtid_list() == other.gtid_list()

    def __repr__(self) -> str:
        return f"BinlogState({','.join(map(str, self.gtid_list()))})"


def start_missing_message(requested: Gtid, state: BinlogState) -> str:
    """ERR 1236 text for a replica's GTID that the binlog does not have (give_error_start_pos_
    missing_in_binlog): the "diverged" form when the domain already went past its seq_no."""
    message = f"Error: connecting slave requested to start from GTID {requested}, which is not in the master's binlog"
    last = state.last(requested.domain_id)
    if last is not None and last.seq_no >= requested.seq_no:
        message += (". Since the master's binlog contains GTIDs with higher sequence numbers, it probably means "
                    "that the slave has diverged due to executing extra erroneous transactions")
    return message
