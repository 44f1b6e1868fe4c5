"""GTID starts through the index of the stored history (storage/history.py), against the primary.

A primary writes one large file of small transactions in two domains and three server_ids, then a
second file.  The relay keeps an index entry every 128 KiB, so a GTID dump jumps over most of the
file.  The same connect states, strict and not, are dumped from both: the events (artificial ones
included) must be the same with the index as written by ingest, with its files deleted, damaged
(flipped bytes, a torn line), stale (written for less than the file holds, or for more: a file
cut back after a crash), and with entries whose offsets point a few entries too early or too late.
The index is only ever a cache: whatever it says, the file decides."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from relay.sandbox.binlogfiles import GTID_EVENT, HEADER_LEN, binlog_events
from relay.sandbox.replication import wait_binlog_settled
from tests.support.metrics import Scrape
from tests.support.relay import wait_for_mirror
from tests.support.replication import (
    gtid_dump_outcome,
    outcome_gtids,
)

INDEX_DIR = "history-index"


def _write_history(primary) -> None:  # type: ignore[no-untyped-def]
    run = primary.execute_many
    run(["CREATE DATABASE h", "CREATE TABLE h.t (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(80)) ENGINE=InnoDB",
         "CREATE PROCEDURE h.fill(n INT) BEGIN DECLARE i INT DEFAULT 0; "
         "WHILE i < n DO INSERT INTO h.t (v) VALUES (REPEAT('x', 60)); SET i = i + 1; END WHILE; END"])
    def write(domain: int, server: int, groups: int) -> None:
        run([f"SET SESSION gtid_domain_id = {domain}", f"SET SESSION server_id = {server}", f"CALL h.fill({groups})"])

    write(0, 1, 6000)  # each row is a group of its own
    write(5, 1, 3)
    write(0, 2, 4)  # 0-2-*, after 0-1-6003
    write(0, 1, 6000)
    write(5, 3, 2)
    write(0, 1, 4000)
    run(["FLUSH BINARY LOGS"])
    write(0, 1, 500)
    run(["SET SESSION server_id = 1"])


def _gtids_in_order(primary) -> list[str]:  # type: ignore[no-untyped-def]
    names = []
    for name, _ in primary.binlog_files():
        for event in binlog_events(primary.binlog_path(name)):
            if event.type == GTID_EVENT:
                seq_no = int.from_bytes(event.data[HEADER_LEN : HEADER_LEN + 8], "little")
                domain = int.from_bytes(event.data[HEADER_LEN + 8 : HEADER_LEN + 12], "little")
                names.append(f"{domain}-{event.server_id}-{seq_no}")
    return names


def _connect_states(gtids: list[str]) -> list[str]:
    """Starts spread over the large file (and the second one), in one domain or both, each
    domain at one of its servers' GTIDs."""
    def last(prefix: str, before: int) -> str:
        return next(g for g in reversed(gtids[:before]) if g.startswith(prefix))

    def first(prefix: str) -> int:
        return next(index for index, g in enumerate(gtids) if g.startswith(prefix))

    second_file = len(gtids) - 500
    domain5, server2, server3 = first("5-1-"), first("0-2-"), first("5-3-")
    states = []
    for at in (domain5 - 2, server2 + 2, server3 - 5, server3 + 2000, second_file - 3, second_file,
               len(gtids) - 2):
        domain0 = last("0-", at)
        states.append(domain0)  # domain 5 not named: its groups come as they are met
        states.append(f"{domain0},{last('5-', max(at, domain5 + 3))}")
    states.append(f"{last('0-2-', server2 + 3)},5-1-3")  # the replica's domain 0 GTID is server 2's
    states.append(f"{last('0-1-', second_file)},{last('5-3-', server3 + 2)}")
    states.append(f"0-1-{int(last('0-1-', len(gtids)).split('-')[2]) + 100000},5-1-3")  # ahead of the binlog
    return states


def _primarys_outcomes(primary_port: int, states: list[str]) -> dict[tuple[str, bool], tuple[str, object]]:
    """What the primary serves each start, strict and not: asked once, as its binlog does not change."""
    return {(state, strict): gtid_dump_outcome(primary_port, state, strict)
            for state in states for strict in (False, True)}


def _differences(primarys: dict[tuple[str, bool], tuple[str, object]], relay_port: int) -> list[str]:
    differences = []
    for (state, strict), expected in primarys.items():
        served = gtid_dump_outcome(relay_port, state, strict)
        if served != expected:
            differences.append(f"{state!r} strict={strict}: primary {outcome_gtids(expected)[:5]}..., "
                               f"relay {outcome_gtids(served)[:5]}...")
    return differences


def _sidecars(relay) -> list[Path]:  # type: ignore[no-untyped-def]
    return sorted((relay.data_dir / INDEX_DIR).glob("*.idx"))


def _read(sidecar: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line.rpartition(b"\t")[0]) for line in sidecar.read_bytes().splitlines()]


def _write(sidecar: Path, lines: list[dict]) -> None:  # type: ignore[type-arg]
    """As the relay writes them: JSON, a tab, the CRC32 of the JSON (so only the content is wrong)."""
    out = b""
    for raw in lines:
        text = json.dumps(raw, separators=(",", ":")).encode()
        out += text + b"\t%08x\n" % zlib.crc32(text)
    sidecar.write_bytes(out)


def _shifted(lines: list[dict], by: int) -> list[dict]:  # type: ignore[type-arg]
    """Each span keeps its GTIDs but takes the offsets of the span ``by`` entries later (or
    earlier): an index that points a few entries too late (or too early)."""
    spans = [raw for raw in lines if "span" in raw]
    out = [lines[0]]
    for index, raw in enumerate(spans):
        other = spans[min(max(index + by, 0), len(spans) - 1)]
        out.append({**raw, "span": other["span"][:3] + raw["span"][3:9] + other["span"][9:]})
    return out


def _flip_and_tear(sidecar: Path) -> None:
    data = bytearray(sidecar.read_bytes())
    data[len(data) // 3] ^= 0x04
    sidecar.write_bytes(bytes(data[: len(data) * 2 // 3]))


def _beyond_the_end(lines: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    """One more span after the last, past the end of the file (a file cut back after a crash)."""
    spans = [raw for raw in lines if "span" in raw]
    if not spans:
        return lines
    end = spans[-1]["span"][1]
    return [lines[0], *spans, {**spans[-1], "span": [end, end + 4000, end + 3900] + spans[-1]["span"][3:]}]


def _restart_with(relay, change) -> None:  # type: ignore[no-untyped-def]
    relay.stop()
    for sidecar in _sidecars(relay):
        change(sidecar)
    relay.start()
    relay.wait_listening()


def test_gtid_starts_through_the_index_are_the_primarys_whatever_the_index_says(mariadb_factory, relay_factory):
    primary = mariadb_factory(server_id=1)
    relay = relay_factory("relay", primary.port, storage={"index_interval": "128K"})
    _write_history(primary)
    wait_binlog_settled(primary)
    wait_for_mirror(primary, relay)
    gtids = _gtids_in_order(primary)
    states = _connect_states(gtids)
    first = primary.binlog_files()[0]
    assert first[1] > 2 << 20, "the large file holds many index entries"
    assert len(_read(relay.data_dir / INDEX_DIR / f"{first[0]}.idx")) > 20

    primarys = _primarys_outcomes(primary.port, states)
    assert not _differences(primarys, relay.port), "with the index ingest wrote"
    jumped = Scrape.fetch(relay.metrics_port).value("binlog_relay_gtid_start_passed_bytes_total", how="index")
    assert jumped and jumped > 10 << 20, "the dumps jumped over the large file"

    complete = {path: _read(path) for path in _sidecars(relay)}
    variants = {
        "deleted": lambda path: path.unlink(),
        "flipped and torn": _flip_and_tear,
        "written for less than the file": lambda path: _write(path, complete[path][: len(complete[path]) // 3]),
        "written for more than the file": lambda path: _write(path, _beyond_the_end(complete[path])),
        "pointing too late": lambda path: _write(path, _shifted(complete[path], 3)),
        "pointing too early": lambda path: _write(path, _shifted(complete[path], -3)),
    }
    for what, change in variants.items():
        _restart_with(relay, change)
        differences = _differences(primarys, relay.port)
        assert not differences, f"with the index {what}:\n" + "\n".join(differences)
    assert relay.alive()
