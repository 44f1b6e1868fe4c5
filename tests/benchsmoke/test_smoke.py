"""One tiny run of every benchmark scenario (bench/suite.py --smoke): real MariaDB servers, the
real relay and real clients, seconds in all.  No figure is judged (they mean nothing at this
size); the run must finish and write a well-formed BENCHMARKS.md and JSON, so the benchmark code
cannot rot between the real runs."""

from __future__ import annotations

import json
import math
import struct
import sys

from bench import archive as bench_archive
from bench import suite
from relay.sandbox.ports import free_port

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PICTURED = {"capacity", "latency", "catchup"}  # the scenarios suite.pictures draws



def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value >= 0


def test_every_scenario_runs_and_writes_its_tables(tmp_path):
    args = suite.parse_args(["--smoke", "--scenarios", ",".join(suite.SCENARIOS),
                             "--name", "smoke",
                             "--port", str(free_port()), "--sandbox-dir", str(tmp_path / "sandbox"),
                             "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "out")])
    results = suite.run_suite(args)
    path = suite.write(results, tmp_path / "out")
    data = json.loads((tmp_path / "out" / suite.ASSETS / "benchmarks.json").read_text())
    scenarios = data["scenarios"]
    assert set(scenarios) == {"latency", "capacity", "catchup", "ingest", "memory", "decode", "gtidstart", "search",
                              "archive"}

    latency = scenarios["latency"]["summary"]
    assert set(latency) == {"direct", "relay sync=commit", "relay sync=none"}
    for source, row in latency.items():
        assert row["n"] == 4 and all(_finite(row[k]) for k in ("p50", "p90", "p99", "max"))
        assert row["p50"] <= row["p90"] <= row["p99"] <= row["max"]
        assert ("added" in row) == (source != "direct")

    capacity = scenarios["capacity"]
    assert capacity["calibration"]["relay"]["events"] == capacity["calibration"]["primary"]["events"]
    for count in ("1", "3"):
        row = capacity["summary"][count]
        assert _finite(row["ratio"]) and row["ratio"] > 0
        assert row["relay"]["max_relay_peak_rss_mib"] > 0

    catchup = scenarios["catchup"]["summary"]
    assert catchup["relay"]["runs"] == catchup["primary"]["runs"] == 1 and _finite(catchup["headline"]["ratio"])
    ingest = scenarios["ingest"]["summary"]
    assert _finite(ingest["headline"]["ratio"]) and _finite(ingest["headline"]["of_ceiling"])
    assert ingest["tools"]["discard reader"]["runs"] == 1
    memory = scenarios["memory"]
    assert memory["transaction"]["rows"] == 3
    assert {r["rows"] for r in memory["runs"] if r["phase"] == "export"} == {3}
    for phase in ("ingest", "export"):
        assert memory["summary"][phase]["relay_peak_rss_mib"] > 0
    for workload in scenarios["decode"]["workloads"].values():
        assert len({row["rows"] for row in workload["tools"].values()}) == 1
        assert all(_finite(row["ratio"]) for row in workload["tools"].values())
        # the discard reader of mysql-replication's dump: the socket's share of its CPU seconds
        socket = workload["socket"]
        assert socket["wire_bytes"] > workload["file_bytes"] // 2 and socket["events"] > 0
        assert _finite(socket["cpu_s"]) and _finite(socket["share_of_mysql_replication"])
    gtid = scenarios["gtidstart"]
    first = gtid["summary"]["first_event"]
    assert first["relay"]["runs"] == first["primary"]["runs"] == 1 and _finite(first["ratio"])
    assert all(_finite(first[source]["median"]) and first[source]["median"] > 0 for source in ("relay", "primary"))
    assert set(gtid["summary"]["storm"]) == {"1", "3"}
    assert all(_finite(row["ratio"]) and row["goal"] is None for row in gtid["summary"]["storm"].values())
    # Every dump was checked against the primary's binlog before its time counted: per source, the
    # first-event client and the 1 + 3 storm clients, each getting the transactions after its start.
    assert gtid["checks"]["dumps"] == 2 * (1 + 1 + 3)
    assert all(run["transactions"] == gtid["back"] for run in gtid["first_event_runs"])
    assert gtid["binlog"]["transactions"] > gtid["back"] + gtid["spread"] and gtid["binlog"]["transactions_after"] == 0
    found = scenarios["search"]
    assert found["binlog"]["files"] >= 20 and len(found["moments"]) == 4
    # every search's answer was checked against a walk of the files before its time counted
    assert len(found["search_runs"]) == len(found["mariadb_binlog_runs"]) == 4
    assert all(_finite(found["summary"][way]["median_s"]) for way in ("search", "command", "mariadb_binlog"))
    arch = scenarios["archive"]
    # every closed file archived (checked against the relay's metrics and, object bytes for object
    # bytes, against the same files compressed in the benchmark), then served back byte for byte
    assert arch["binlog"]["closed_files"] >= 3 and len(arch["archive_runs"]) == 1
    assert all(run["uploaded_file_bytes"] == arch["binlog"]["closed_bytes"] for run in arch["archive_runs"])
    assert _finite(arch["summary"]["archive"]["headline"]["ratio"])
    assert {run["source"] for run in arch["serve_runs"]} == {bench_archive.FIRST, bench_archive.SHELF,
                                                             bench_archive.LOCAL}
    assert all(run["verified"] for run in arch["serve_runs"])
    assert [run["fetched_bytes"] for run in arch["serve_runs"]] == [arch["served_file"]["bytes"], 0, 0]
    assert _finite(arch["summary"]["serve"]["headline"]["ratio"])
    for part in ("archive", "serve"):  # the best the machine allows: above with the store elsewhere
        bound = arch["summary"][part]["cpu_bound"]
        # the store's CPU is read in clock ticks (10 ms): the smoke run's one small read may cost it less
        assert bound["store_cpu_s"] >= 0 and 0 < bound["ratio_at_most"] <= bound["ratio_at_most_store_elsewhere"]
        assert (bound["ratio_at_most"] < bound["ratio_at_most_store_elsewhere"]) == (bound["store_cpu_s"] > 0)
    for variant in ("plain", "encrypted"):
        row = arch["summary"]["compression"][variant]
        assert row["ratio"] > 1 and _finite(row["compress_cpu_s_per_gib"]["median"])

    text = path.read_text()
    for heading in ("## Latency", "## Serve capacity", "## Replica catch-up", "## Ingest", "## Memory",
                    "## Pipeline decode", "## GTID starts", "## Search by time", "## Archive"):
        assert heading in text
    assert "smoke run" in text
    assert "over TCP" in text and "discard reader (socket only)" in text

    # The pictures (matplotlib is in the test extra): one per scenario that draws one, each a PNG
    # with a picture in it, shown in BENCHMARKS.md.
    assert set(data["pictures"]) == PICTURED
    for name, picture in data["pictures"].items():
        png = (tmp_path / "out" / picture).read_bytes()
        assert png[:8] == PNG_SIGNATURE and png[12:16] == b"IHDR", name
        width, height = struct.unpack(">II", png[16:24])
        assert width >= 300 and height >= 200 and len(png) > 5_000, (name, width, height, len(png))
        assert f"]({picture})" in text


def test_a_real_run_refuses_a_checkout_without_the_compiled_modules(monkeypatch, capsys):
    """A fresh worktree has no built C modules: the relay would run its Python loops, several times
    slower, and the run's figures would measure those (one such run on 2026-11-27 did)."""
    assert suite.parse_args(["--scenarios", "archive"]).scenarios == ["archive"]  # built here
    monkeypatch.setitem(sys.modules, "relay.pipeline._jsontext", None)  # as if never built
    try:
        suite.parse_args(["--scenarios", "archive"])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("a run without the compiled modules was accepted")
    assert "relay.pipeline._jsontext not built" in capsys.readouterr().err
    assert suite.parse_args(["--smoke"]).smoke  # a smoke run judges no figure
