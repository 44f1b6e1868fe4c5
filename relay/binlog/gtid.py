"""MariaDB GTID positions: 'domain-server-seq' lists, as in @@gtid_slave_pos and GTID_LIST events."""

from __future__ import annotations

import re
from dataclasses import dataclass

_GTID = re.compile(r"^(\d+)-(\d+)-(\d+)$")


class GtidError(ValueError):
    """A GTID position string a replica sent cannot be parsed."""


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
            raise GtidError(f"Could not parse GTID list: '{text}'")
        gtid = Gtid(*(int(n) for n in match.groups()))
        if gtid.domain_id in position:
            raise GtidError(f"GTID {gtid} and {position[gtid.domain_id]} conflict (duplicate domain id "
                            f"{gtid.domain_id})")
        position[gtid.domain_id] = gtid
    return position


def format_gtid_position(position: dict[int, Gtid]) -> str:
    return ",".join(str(position[domain]) for domain in sorted(position))
