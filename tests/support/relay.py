"""Waiting until a relay child (relay.sandbox.relayprocess.RelayProcess) mirrors its primary, and
checking the index of the stored history it wrote against its files."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

from relay.gtid.spans import span_from_json
from relay.sandbox.compare import mirror_differences
from relay.sandbox.mariadb import LocalMariaDB
from relay.sandbox.polling import wait_for
from relay.sandbox.relayprocess import RelayProcess
from relay.storage.history import INDEX_DIR, walk_file
from relay.storage.index import read_index


def wait_for_mirror(primary: LocalMariaDB, relay: RelayProcess, timeout: float = 60.0) -> None:
    """Until the relay's data_dir is a byte copy of the primary's binlogs (relay.sandbox.compare);
    fails at once if the relay exits, and names the differences left at the deadline."""
    last: list[str] = []

    def mirrored() -> bool:
        nonlocal last
        relay.check_alive()
        last = mirror_differences(primary, relay.data_dir)
        return not last

    try:
        wait_for(mirrored, timeout, "relay did not become a mirror of the primary")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {last}\n{relay.log_tail()}") from None


def assert_index_matches_files(data_dir: Path) -> int:
    """Every entry of the index of the stored history (history-index/) is what a walk of its
    stretch of the file finds, the entries of a file follow each other from offset 4, and a closed
    file's index says it is complete; returns how many entries were checked.  (The relay may still
    be appending to the newest file's: a last line cut short is not an entry yet.)"""
    files = read_index(data_dir)
    checked = 0
    for number, name in enumerate(files):
        lines = (data_dir / INDEX_DIR / f"{name}.idx").read_bytes().split(b"\n")
        raw = [json.loads(text) for text, _, crc in (line.rpartition(b"\t") for line in lines)
               if crc and int(crc, 16) == zlib.crc32(text)]
        assert raw[0] == {"binlog_history_index": 1, "file": name}, raw[:1]
        spans = [span_from_json(item) for item in raw[1:] if "span" in item]
        # (the newest file may have no entry yet: one is written every index_interval bytes)
        assert [span.start for span in spans] == [4, *[span.end for span in spans[:-1]]][: len(spans)], (
            name, [(span.start, span.end) for span in spans], (data_dir / name).stat().st_size, files[-3:])
        for span in spans:
            assert walk_file(data_dir / name, span.start, span.end) == span, (name, span.start)
        if number < len(files) - 1:
            assert raw[-1].get("complete") == (data_dir / name).stat().st_size, (name, raw[-1])
        checked += len(spans)
    return checked
