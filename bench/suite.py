"""The benchmark suite: every scenario in one run, written up as BENCHMARKS.md (tables with the
ratio against MariaDB, the machine, pictures) and one JSON.

    python3 -m bench.suite [--scenarios latency,capacity,catchup,ingest,memory,decode,gtidstart,search,archive]
                           [--out DIR]
                           [--reuse]
    python3 -m bench.suite --smoke --out /tmp/x     # tiny sizes, seconds: proves the code runs

Scenarios (each module's own docstring says how it measures; all alternate relay and MariaDB
in one run):
  latency   bench/latency.py   commit -> row visible on a replica, direct vs through the relay
  capacity  bench/capacity.py  raw dump clients 1/10/50/100 at once, relay vs primary
  catchup   bench/catchup.py   a fresh replica's IO thread fetching the binlog, relay vs primary
  ingest    bench/ingest.py    the relay fetching the binlog vs mariadb-binlog --raw (and a discard reader)
  memory    bench/memory.py    peak RSS ingesting and exporting one 1 GB transaction
  decode    bench/decode.py    row decoding and the export's JSON form of a local file vs
                               python-mysql-replication streaming it over TCP (and the socket's share)
  gtidstart bench/gtidstart.py GTID replicas starting near the end of a 1 GiB file: first event, storms
  archive   bench/archive.py   the S3 archive (moto) keeping up with ingest, zstd/AES CPU per GiB, a file only
                               the archive holds served vs the same file local
capacity, catchup and ingest share one sandbox primary (filled once by sysbench; ``--reuse``
keeps it for the next run); memory and gtidstart have their own (gtidstart: one 1 GiB binlog
file).  Pictures (matplotlib, the ``bench`` extra): throughput per client
count, the latency distribution, catch-up MiB/s; without matplotlib the tables are written alone.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from relay.sandbox.ports import free_port

from . import archive, capacity, catchup, decode, gtidstart, ingest, latency, memory, search
from .common import REPO_ROOT, log, machine_info, missing_compiled_modules, run_main, sandbox_primary

SCENARIOS = ("latency", "capacity", "catchup", "ingest", "memory", "decode", "gtidstart", "search", "archive")
ASSETS = "benchmarks"  # beside BENCHMARKS.md: the pictures and the JSON
ARCHIVE_ROUNDS = 7


def scenario_args(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each scenario's command line: the shared sandbox, and the sizes of a smoke run."""
    shared = ["--name", args.name, "--port", str(args.port), "--sandbox-dir", args.sandbox_dir]
    if args.smoke:
        shared += ["--fill", "sql", "--size-mb", "0.5", "--min-mb", "0.1", "--max-binlog-size", "256K"]
    else:
        shared += ["--size-mb", str(args.size_mb), "--min-mb", str(args.min_mb)]
    keep = ["--reuse"] if args.reuse or args.keep_sandbox else []
    rounds = ["--rounds", "1" if args.smoke else str(args.rounds)]
    # The archive's ratios move with how ingest, the archiver and moto share the cores from one round to
    # the next (0.41 to 0.69 in three rounds of one run): more rounds for its medians.
    archive_rounds = ["--rounds", "1" if args.smoke else str(max(args.rounds, ARCHIVE_ROUNDS))]
    work = Path(args.workdir)
    return {
        "latency": (["--commits", "4", "--block", "2"] if args.smoke else ["--commits", str(args.commits)])
        + ["--workdir", str(work / "latency")],
        "capacity": [*shared, *keep, *rounds, "--clients", "1,3" if args.smoke else args.clients,
                     "--workdir", str(work / "capacity")],
        "catchup": [*shared, *keep, *rounds, "--workdir", str(work / "catchup")],
        "ingest": [*shared, *keep, *rounds, "--workdir", str(work / "ingest")],
        "memory": [*(["--size-mb", "3", "--port", str(free_port())] if args.smoke else []), "--sandbox-dir",
                   args.sandbox_dir, *keep, *rounds, "--workdir", str(work / "memory")],
        "decode": [*(["--oltp", "50", "--bulk", "500"] if args.smoke else []), *rounds],
        "gtidstart": [*(["--fill", "sql", "--size-mb", "2", "--min-mb", "1", "--port", str(free_port()), "--clients",
                         "1,3"] if args.smoke else []), "--sandbox-dir", args.sandbox_dir, *keep, *rounds,
                      "--workdir", str(work / "gtidstart")],
        "search": [*(["--fill", "sql", "--size-mb", "1", "--min-mb", "0.5", "--max-binlog-size", "16K", "--min-files",
                      "20", "--port", str(free_port())] if args.smoke else []), "--sandbox-dir", args.sandbox_dir,
                   *keep, *rounds, "--workdir", str(work / "search")],
        "archive": [*(["--fill", "sql", "--size-mb", "1", "--min-mb", "0.5", "--max-binlog-size", "128K", "--port",
                       str(free_port()), "--live-seconds", "3"] if args.smoke else []),
                    "--sandbox-dir", args.sandbox_dir, *keep, *archive_rounds,
                    "--workdir", str(work / "archive")],
    }


def run_suite(args: argparse.Namespace) -> dict[str, Any]:
    modules = {"latency": latency, "capacity": capacity, "catchup": catchup, "ingest": ingest, "memory": memory,
               "decode": decode, "gtidstart": gtidstart, "search": search, "archive": archive}
    argv = scenario_args(args)
    results: dict[str, Any] = {"machine": machine_info(), "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                               "smoke": args.smoke, "scenarios": {}}
    for name in args.scenarios:
        log(f"suite: {name}: python3 -m bench.{name} {' '.join(argv[name])}")
        module = modules[name]
        scenario = module.parse_args(argv[name])
        results["scenarios"][name] = module.run_benchmark(scenario)
        print(module.report(results["scenarios"][name]), flush=True)
    if not args.reuse and not args.keep_sandbox and set(args.scenarios) & {"capacity", "catchup", "ingest"}:
        sandbox_primary(args).destroy()
    return results


# ---------------------------------------------------------------- pictures


def pictures(results: dict[str, Any], out: Path) -> dict[str, str]:
    """PNG files (in ``out``/benchmarks/) by scenario name, relative to ``out``; none without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter
    except ImportError:
        log("matplotlib is not installed (pip install -e '.[bench]'): BENCHMARKS.md gets no pictures")
        return {}
    made = {}
    scenarios = results["scenarios"]
    if "capacity" in scenarios:
        cap = scenarios["capacity"]
        counts = cap["clients"]
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for source, style in (("relay", "o-"), ("primary", "s--")):
            rows = [cap["summary"][str(n)][source] for n in counts]
            ax.errorbar(counts, [r["median_aggregate_mib_per_s"] for r in rows],
                        yerr=[[r["median_aggregate_mib_per_s"] - r["min_aggregate_mib_per_s"] for r in rows],
                              [r["max_aggregate_mib_per_s"] - r["median_aggregate_mib_per_s"] for r in rows]],
                        fmt=style, capsize=3, label="relay" if source == "relay" else "MariaDB primary")
        ax.set_xscale("log")
        ax.set_xticks(counts, [str(n) for n in counts])
        ax.set_xlabel("clients at once")
        ax.set_ylabel("aggregate MiB/s (median, min-max)")
        ax.set_ylim(bottom=0)
        ax.set_title("Serve capacity: raw dump clients")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / ASSETS / "capacity.png", dpi=110)
        plt.close(fig)
        made["capacity"] = f"{ASSETS}/capacity.png"
    if "latency" in scenarios:
        lat = scenarios["latency"]
        fig, ax = plt.subplots(figsize=(6, 3.6))
        for source, values in lat["samples_ms"].items():
            data = sorted(values)
            ax.plot(data, [(i + 1) / len(data) for i in range(len(data))], label=source)
        ax.set_xscale("log")
        # plain millisecond labels: matplotlib's minor log labels overlap at this width
        every = [v for values in lat["samples_ms"].values() for v in values]
        ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 1, 2, 3, 5, 10, 20, 50) if min(every) <= t <= max(every)]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("commit on the primary -> visible on the replica (ms)")
        ax.set_ylabel("share of commits (CDF)")
        ax.set_title("Replication latency")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / ASSETS / "latency.png", dpi=110)
        plt.close(fig)
        made["latency"] = f"{ASSETS}/latency.png"
    if "catchup" in scenarios:
        cu = scenarios["catchup"]
        fig, ax = plt.subplots(figsize=(6, 2.6))
        for y, source in enumerate(("primary", "relay")):
            runs = [r["mib_per_s"] for r in cu["runs"] if r["source"] == source]
            ax.scatter(runs, [y] * len(runs), alpha=0.6)
            ax.plot([cu["summary"][source]["median_mib_per_s"]] * 2, [y - 0.3, y + 0.3], "k-")
        ax.set_yticks([0, 1], ["MariaDB primary", "relay"])
        ax.set_ylim(-0.6, 1.6)
        ax.set_xlim(left=0)
        ax.set_xlabel("MiB/s fetched by a fresh replica's IO thread (dots: runs, bar: median)")
        fig.tight_layout()
        fig.savefig(out / ASSETS / "catchup.png", dpi=110)
        plt.close(fig)
        made["catchup"] = f"{ASSETS}/catchup.png"
    return made


# ---------------------------------------------------------------- BENCHMARKS.md


def _goal(met: bool) -> str:
    return "met" if met else "**not met**"


def markdown(results: dict[str, Any], images: dict[str, str]) -> str:
    machine = results["machine"]
    lines = ["# Benchmarks", "",
             f"Written by `bash scripts/bench.sh suite` (`python3 -m bench.suite`) on {results['started']}"
             + (" — **smoke run, tiny sizes: the figures mean nothing**" if results["smoke"] else "") + ".",
             f"Machine: {machine['cpus']} CPUs, load {machine['loadavg'][0]:.2f} / {machine['loadavg'][1]:.2f} / "
             f"{machine['loadavg'][2]:.2f} at the start, Linux {machine['kernel']}, Python {machine['python']}, "
             f"relay loops: {machine['relay_loops']}. "
             "Every scenario alternates the relay and MariaDB in one run; figures are medians with their "
             "min-max range; ratio = relay / MariaDB (>= 1.0: the relay is not the slower link). "
             "How each is measured: the module docstrings in bench/ and bench/README.md.", ""]
    scenarios = results["scenarios"]
    if "latency" in scenarios:
        lat = scenarios["latency"]
        s = lat["summary"]
        lines += ["## Latency: commit on the primary -> row visible on a MariaDB replica", "",
                  f"{lat['commits']} single-row commits per source in alternating blocks of {lat['block']}; "
                  f"MariaDB {lat['primary']['version']}; relay {lat['relay']['commit']}. Goals: added p50 <= 0.3 ms "
                  "and added p99 <= 1 ms with `sync: commit`.", "",
                  "| source | p50 ms | p90 ms | p99 ms | max ms | block p50 range | added p50 | added p99 |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for source, row in s.items():
            added = row.get("added")
            lines.append(f"| {source} | {row['p50']:.2f} | {row['p90']:.2f} | {row['p99']:.2f} | {row['max']:.2f} | "
                         f"{row['block_p50_min']:.2f}-{row['block_p50_max']:.2f} | "
                         + (f"{added['p50']:+.2f} | {added['p99']:+.2f} |" if added else "(ref) | (ref) |"))
        if "relay sync=commit" in s:
            added = s["relay sync=commit"]["added"]
            lines += ["", f"`sync: commit`: added p50 {added['p50']:+.2f} ms ({_goal(added['p50'] <= 0.3)}), "
                          f"added p99 {added['p99']:+.2f} ms ({_goal(added['p99'] <= 1.0)})."]
        if "latency" in images:
            lines += ["", f"![latency distribution]({images['latency']})"]
        lines.append("")
    if "capacity" in scenarios:
        cap = scenarios["capacity"]
        b = cap["binlog"]
        lines += ["## Serve capacity: raw dump clients, relay vs primary", "",
                  f"Whole binlog of {b['mib']:.0f} MiB ({b['events']:,} events) to clients that discard what "
                  f"they read; {cap['rounds']} rounds. Goals: ratio >= 1.0 at every count, relay RSS <= 150 MB at "
                  f"{max(cap['clients'])}.", "",
                  "| clients | relay MiB/s | primary MiB/s | ratio | relay CPU s/GiB | primary CPU s/GiB | "
                  "relay peak RSS MiB |", "|---:|---:|---:|---:|---:|---:|---:|"]
        for n in cap["clients"]:
            row = cap["summary"][str(n)]
            r, p = row["relay"], row["primary"]
            lines.append(f"| {n} | {r['median_aggregate_mib_per_s']:.0f} ({r['min_aggregate_mib_per_s']:.0f}-"
                         f"{r['max_aggregate_mib_per_s']:.0f}) | {p['median_aggregate_mib_per_s']:.0f} "
                         f"({p['min_aggregate_mib_per_s']:.0f}-{p['max_aggregate_mib_per_s']:.0f}) | "
                         f"{row['ratio']:.2f} | {r['median_server_cpu_s_per_gib']:.2f} | "
                         f"{p['median_server_cpu_s_per_gib']:.2f} | {r['max_relay_peak_rss_mib'] or 0:.0f} |")
        head = cap["summary"]["headline"]
        lines += ["", f"Lowest ratio {head['min_ratio']:.2f} ({_goal(head['goal_met'])}); peak RSS at "
                      f"{max(cap['clients'])} clients {head['peak_rss_mib_at_most_clients']:.0f} MiB "
                      f"({_goal(head['rss_goal_met'])})."]
        if "capacity" in images:
            lines += ["", f"![throughput per client count]({images['capacity']})"]
        lines.append("")
    if "catchup" in scenarios:
        cu = scenarios["catchup"]
        s = cu["summary"]
        lines += ["## Replica catch-up: a fresh MariaDB replica's IO thread", "",
                  f"{cu['binlog']['mib']:.0f} MiB from the first file, {cu['rounds']} alternating rounds. "
                  "Goal: ratio >= 1.0.", "",
                  "| source | seconds | MiB/s | range | source CPU s | replica CPU s | ratio |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for source in ("relay", "primary"):
            row = s[source]
            lines.append(f"| {source} | {row['median_seconds']:.2f} | {row['median_mib_per_s']:.1f} | "
                         f"{row['min_mib_per_s']:.1f}-{row['max_mib_per_s']:.1f} | {row['median_server_cpu_s']:.2f} | "
                         f"{row['median_replica_cpu_s']:.2f} | "
                         + (f"{s['headline']['ratio']:.2f} |" if source == "relay" else "1.00 (ref) |"))
        lines += ["", f"Ratio {s['headline']['ratio']:.2f} ({_goal(s['headline']['goal_met'])})."]
        if "catchup" in images:
            lines += ["", f"![catch-up]({images['catchup']})"]
        lines.append("")
    if "ingest" in scenarios:
        ing = scenarios["ingest"]
        b = ing["binlog"]
        lines += ["## Ingest: the relay fetching the binlog vs `mariadb-binlog --raw`", "",
                  f"{b['mib']:.0f} MiB ({b['events']:,} events), {ing['rounds']} alternating rounds. The discard "
                  "reader reads the same dump into a buffer it throws away: the most the primary's dump thread "
                  "hands out here. Goal: ratio >= 1.0.", "",
                  "| tool | seconds | MiB/s | CPU s | peak RSS MiB | ratio | of the discard reader |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for tool, row in ing["summary"]["tools"].items():
            ratio = f"{row['ratio']:.2f}" if "ratio" in row else ("1.00 (ref)" if tool.startswith("mariadb") else "-")
            rss = f"{row['max_peak_rss_mib']:.0f}" if row["max_peak_rss_mib"] else "-"
            lines.append(f"| {tool} | {row['median_seconds']:.2f} | {row['median_mib_per_s']:.1f} | "
                         f"{row['median_cpu_s']:.2f} | {rss} | {ratio} | {row.get('of_ceiling', 1.0):.2f} |")
        head = ing["summary"]["headline"]
        lines += ["", f"Ratio {head['ratio']:.2f} ({_goal(head['goal_met'])}); {head['of_ceiling']:.2f} of the "
                      "discard reader.", ""]
    if "memory" in scenarios:
        mem = scenarios["memory"]
        t = mem["transaction"]
        lines += ["## Memory: one transaction of 1 GB", "",
                  f"One event group of {t['mib']:.0f} MiB ({t['rows']} rows of 1 MiB), {mem['rounds']} alternating "
                  "rounds. Ingest: the relay (`sync: commit`) vs `mariadb-binlog --raw`; export: the Spark "
                  "worker's path (change rows, JSON images, Arrow batches) vs python-mysql-replication reading "
                  "the same rows. Goal: the relay's peak RSS <= 200 MB in both.", "",
                  "| phase | tool | seconds | peak RSS MiB |", "|---|---|---:|---:|"]
        for phase, s in mem["summary"].items():
            for tool, row in s["tools"].items():
                lines.append(f"| {phase} | {tool} | {row['median_seconds']:.1f} | {row['max_peak_rss_mib']:.0f} |")
        lines += [""] + [f"{phase.capitalize()}: relay {s['relay_peak_rss_mib']:.0f} MiB "
                         f"({_goal(s['goal_met'])})." for phase, s in mem["summary"].items()] + [""]
    if "decode" in scenarios:
        dec = scenarios["decode"]
        lines += ["## Pipeline decode: change rows and their JSON, vs python-mysql-replication", "",
                  f"One core, CPU seconds of the decoding process, {dec['rounds']} rounds: *oltp* ({dec['oltp']:,} "
                  f"small transactions) and *bulk* (one INSERT ... SELECT of {dec['bulk']:,} rows). The relay "
                  "decodes the local binlog file; python-mysql-replication streams the same file from mariadbd "
                  "over TCP (loopback). *relay*: change rows decoded; *relay+json*: and each row image turned into "
                  "the JSON the export writes; *discard reader*: mysql-replication's dump received and thrown away "
                  "(bench/rawclient.py), the socket's share of its CPU seconds, in no ratio. Ratio: "
                  f"mysql-replication's CPU seconds over the relay's for the same file. Goals: decoding >= "
                  f"{dec['goals']['decode']:.0f}x, export form >= {dec['goals']['export']:.0f}x.", "",
                  "| workload | tool | CPU s | range | k rows/s | ratio |", "|---|---|---:|---:|---:|---:|"]
        for label, w in dec["workloads"].items():
            for tool, row in w["tools"].items():
                lines.append(f"| {label} | {tool} | {row['cpu_s']:.2f} | {row['cpu_s_min']:.2f}-{row['cpu_s_max']:.2f} "
                             f"| {row['rows_per_s'] / 1000:.0f} | {row['ratio']:.1f} |")
            if "socket" in w:  # not in the JSON of runs before it was measured
                sock = w["socket"]
                lines.append(f"| {label} | {decode.DISCARD} | {sock['cpu_s']:.2f} | "
                             f"{sock['cpu_s_min']:.2f}-{sock['cpu_s_max']:.2f} | - | - |")
        lines += [""] + [f"{label}: decoding {_goal(w['goals']['decode'])}, export form {_goal(w['goals']['export'])}"
                         + (f"; {decode.socket_note(w['socket'])}" if "socket" in w else "") + "."
                         for label, w in dec["workloads"].items()] + [""]
    if "gtidstart" in scenarios:
        lines += _gtidstart_section(scenarios["gtidstart"])
    if "search" in scenarios:
        lines += _search_section(scenarios["search"])
    if "archive" in scenarios:
        lines += _archive_section(scenarios["archive"])
    if results.get("notes"):
        lines += ["## Notes", "", results["notes"].strip(), ""]
    return "\n".join(lines)


def _gtidstart_section(gtid: dict[str, Any]) -> list[str]:
    b, s = gtid["binlog"], gtid["summary"]
    first = s["first_event"]
    where = "restarted before each run" if gtid["relay"]["restarted_before_each_run"] else "running, the file mirrored"
    lines = ["## GTID starts and reconnect storms: relay vs primary", "",
             (f"MariaDB GTID replicas (`@slave_connect_state`, COM_BINLOG_DUMP from an empty file name) starting "
              f"{gtid['back']} transactions before the end of {b['start_file']} ({b['mib']:.0f} MiB, "
              f"{b['transactions']:,} transactions): the server finds that file and the replica's GTID in it "
              f"(MariaDB 10.11 reads the file from its first event); the relay {where}; {gtid['rounds']} alternating "
              "rounds. *First event*: one client, COM_BINLOG_DUMP -> its first transaction. *Storm*: N clients at "
              f"once ({gtid['back']} +- {gtid['spread']} transactions before the end), first connect -> the last at "
              "the end of the binlog. Every dump checked: exactly the transactions after its connect state. Ratio: "
              f"primary time / relay time. Goals: relay first event <= {first['goal_ms']:.0f} ms; storm ratio >= 10 "
              "at 20 and 100 clients."), "",
             "| figure | relay | primary | relay CPU s | primary CPU s | ratio | goal |",
             "|---|---:|---:|---:|---:|---:|---|"]
    r, p = first["relay"], first["primary"]
    lines.append(f"| first event, ms | {r['median']:.1f} ({r['min']:.1f}-{r['max']:.1f}) | {p['median']:.1f} "
                 f"({p['min']:.1f}-{p['max']:.1f}) | {r['median_server_cpu_s']:.2f} | {p['median_server_cpu_s']:.2f} | "
                 f"{first['ratio']:.2f} | relay <= {first['goal_ms']:.0f} ms: {_goal(first['goal_met'])} |")
    for n in gtid["clients"]:
        row = s["storm"][str(n)]
        r, p = row["relay"], row["primary"]
        goal = f">= {row['goal']:.0f}: {_goal(row['goal_met'])}" if row["goal"] is not None else "-"
        lines.append(f"| storm of {n}, s | {r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f}) | {p['median']:.3f} "
                     f"({p['min']:.3f}-{p['max']:.3f}) | {r['median_server_cpu_s']:.2f} | "
                     f"{p['median_server_cpu_s']:.2f} | {row['ratio']:.2f} | {goal} |")
    lines += ["", f"Checked: {gtid['checks']['dumps']} dumps, {gtid['checks']['transactions']:,} transactions.", ""]
    return lines


def _search_section(found: dict[str, Any]) -> list[str]:
    b, s = found["binlog"], found["summary"]
    lines = ["## Search by time: `binlog-relay search` vs `mariadb-binlog --stop-datetime`", "",
             (f"The last transaction committed at or before a moment, over {b['files']} files "
              f"({b['bytes'] / 2**20:.0f} MiB, {b['transactions']:,} transactions) the relay mirrored; "
              f"{len(found['moments'])} moments (in the files at 10, 50, 90 % of the history, and past its end), "
              f"{found['rounds']} rounds. *Search*: one call in a process that imported the relay, nothing of the "
              "index in memory; *the command*: `binlog-relay search --time`, interpreter start included; "
              "*mariadb-binlog*: reading the files up to the moment, what finding it takes without an index. Every "
              f"answer checked against a walk of the files. Goal: a search <= {s['goal_ms']:.0f} ms."), "",
             "| way | median ms | range ms |", "|---|---:|---:|"]
    for label, key in (("search (one call)", "search"), ("`binlog-relay search` (the command)", "command"),
                       ("`mariadb-binlog --stop-datetime`", "mariadb_binlog")):
        ms = {name: s[key][name] * 1000 for name in ("median_s", "min_s", "max_s")}
        lines.append(f"| {label} | {ms['median_s']:.1f} | {ms['min_s']:.1f}-{ms['max_s']:.1f} |")
    lines += ["", f"Search {s['search']['median_s'] * 1000:.1f} ms: {_goal(s['goal_met'])}; mariadb-binlog takes "
              f"{s['ratio']:.0f} times as long.", ""]
    return lines


def _bound_sentence(part: dict[str, Any], work: str) -> str:
    """What the machine allows at best (archive.cpu_bound), if measured."""
    bound = part.get("cpu_bound")
    if bound is None:
        return ""
    return (f" The most these {bound['cpus']} CPUs allow, whatever the relay does: {bound['ratio_at_most']:.2f}, "
            f"were the CPU seconds no implementation can skip spread perfectly over them all ({work}; moto's "
            f"{bound['store_cpu_s']:.2f} s); {bound['ratio_at_most_store_elsewhere']:.2f} with the store on another "
            "machine.")


def _archive_section(arch: dict[str, Any]) -> list[str]:
    b, s, conf, f = arch["binlog"], arch["summary"], arch["archive_config"], arch["served_file"]
    a, serve = s["archive"], s["serve"]

    def spread(name: str, fmt: str) -> str:
        return f"{a[name]['median']:{fmt}} ({a[name]['min']:{fmt}}-{a[name]['max']:{fmt}})"

    lines = ["## Archive: S3 (moto) keeping up with ingest, its CPU cost, archived files served back", "",
             (f"{b['mib']:.0f} MiB of binlog in {len(b['files'])} files ({b['closed_files']} closed, "
              f"{b['closed_mib']:.0f} MiB), archived {'encrypted' if conf['encrypted'] else 'plain'} with zstd level "
              f"{conf['level']} in 4 MiB frames to {arch['store']['server']} on loopback (in memory); "
              f"{arch['rounds']} rounds. *Archive vs ingest*: one relay ingests the binlog while it archives it "
              "(the newest file uploaded as it is written; at its close its events checked, the upload completed "
              "and compared with the store's CRC32 of the object, meta), timed from the relay's first answer to "
              "the primary's end (ingest) and to the last closed file archived (archive); before each round the "
              "same relay without an archive ingests the binlog alone (ingest at full speed). Goal: the archive "
              "keeps up with ingest at full speed, the closed files' MiB over the time to archive them / ingest "
              "alone's MiB/s >= 1.0."), "",
             "| figure | median (range) |", "|---|---:|",
             f"| ingest alone, s (MiB/s) | {spread('ingest_alone_s', '.2f')} "
             f"({a['ingest_alone_mib_per_s']['median']:.1f}) |",
             f"| ingest while archiving, s (MiB/s) | {spread('ingest_s', '.2f')} "
             f"({a['ingest_mib_per_s']['median']:.1f}) |",
             f"| ingest while archiving / alone | {spread('ingest_cost', '.2f')} |",
             f"| archive done, s (MiB/s end to end) | {spread('archive_done_s', '.2f')} "
             f"({a['archive_end_to_end_mib_per_s']['median']:.1f}) |",
             f"| ingest while archiving s / archive done s (1.0: kept up with it) | {spread('kept_up', '.2f')} |",
             f"| a closed file waiting for the archive, s in all | {spread('archive_busy_s', '.2f')} |",
             f"| relay CPU s (of it after ingest) | {spread('relay_cpu_s', '.2f')} "
             f"({a['relay_cpu_s_after_ingest']['median']:.2f}) |",
             f"| moto CPU s | {spread('moto_cpu_s', '.2f')} |",
             f"| zstd ratio (file / object bytes) | {a['zstd_ratio']['median']:.2f} |", "",
             f"Archive end to end / ingest alone {a['headline']['ratio']:.2f} ({_goal(a['headline']['goal_met'])})."
             + _bound_sentence(a, "ingest alone's, the relay's and the primary's; compressing the closed files, "
                                  "at part 4's rate"),
             "",
             (f"*Serving* {f['name']} ({f['mib']:.1f} MiB), which only the archive holds, to `mariadb-binlog --raw` "
              "(the relay restarted before each round: the first read fetches it back frame by frame and serves "
              "the copy as it grows, the second reads the copy on the relay's shelf), against the same file local to "
              "a relay that imported it; "
              "every copy checked byte for byte. Goal: first read / local >= 0.5."), "",
             "| source | seconds | MiB/s | range | relay CPU s | ratio |", "|---|---:|---:|---:|---:|---:|"]
    for source in (archive.FIRST, archive.SHELF, archive.LOCAL):
        row = serve[source]
        lines.append(f"| {source} | {row['seconds']['median']:.3f} | {row['mib_per_s']['median']:.1f} | "
                     f"{row['mib_per_s']['min']:.1f}-{row['mib_per_s']['max']:.1f} | "
                     f"{row['median_server_cpu_s']:.2f} | "
                     + ("1.00 (ref) |" if source == archive.LOCAL else f"{row['ratio']:.2f} |"))
    lines += ["", f"First read / local {serve['headline']['ratio']:.2f} ({_goal(serve['headline']['goal_met'])})."
              + _bound_sentence(serve, "a local read's, the relay's and the client's; decoding the file, at part "
                                       "4's rate"), ""]
    live = arch.get("live")
    if live is not None:
        lines += [(f"*Following a live primary*: a second primary written by {live['load']} at full speed for "
                   f"{live['seconds']:.0f} s, a fresh relay with the archive following it (files of "
                   f"{arch['primary']['max_binlog_size']}); the archive's lag is what is closed and not archived yet, "
                   "sampled every 50 ms."), "",
                  "| figure | value |", "|---|---:|",
                  f"| the primary wrote, MiB/s | {live['primary_mib_per_s']:.1f} |",
                  f"| files closed under the load | {live['files_closed']} |",
                  f"| archive lag at most, files (MiB) | {live['max_lag_files']:.0f} ({live['max_lag_mib']:.1f}) |",
                  f"| every closed file archived, s after the load | {live['drain_after_load_s']:.2f} |",
                  f"| relay CPU s / moto CPU s | {live['relay_cpu_s']:.2f} / {live['moto_cpu_s']:.2f} |", "",
                  (f"Archive MiB/s of the burst above, end to end / what the primary wrote = "
                   f"{a['archive_end_to_end_mib_per_s']['median'] / max(live['primary_mib_per_s'], 1e-9):.1f}."), ""]
    lines += [("*Object format cost*: the closed files through the archive's ObjectWriter and back through "
               "ObjectReader.decode_frame in the benchmark's process, CPU seconds of one core per GiB of file."), "",
              "| variant | zstd level | compress CPU s/GiB | decode CPU s/GiB | zstd ratio |",
              "|---|---:|---:|---:|---:|"]
    for variant, c in s["compression"].items():
        lines.append(f"| {variant} | {c.get('level', '')} | {c['compress_cpu_s_per_gib']['median']:.2f} | "
                     f"{c['decode_cpu_s_per_gib']['median']:.2f} | {c['ratio']:.2f} |")
    lines.append("")
    return lines


def write(results: dict[str, Any], out: Path, notes: str | None = None) -> Path:
    (out / ASSETS).mkdir(parents=True, exist_ok=True)
    if notes:
        results["notes"] = notes
    images = pictures(results, out)
    results["pictures"] = images
    (out / ASSETS / "benchmarks.json").write_text(json.dumps(results, indent=1) + "\n")
    path = out / "BENCHMARKS.md"
    path.write_text(markdown(results, images))
    return path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench.suite", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    p.add_argument("--out", default=str(REPO_ROOT),
                   help="where BENCHMARKS.md goes (benchmarks/ beside it: the JSON, PNGs)")
    p.add_argument("--notes", metavar="FILE", help="markdown appended to BENCHMARKS.md as its Notes section")
    p.add_argument("--from-json", metavar="PATH", help="rewrite BENCHMARKS.md from an earlier benchmarks.json")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, one round: seconds; figures mean nothing")
    p.add_argument("--reuse", action="store_true", help="reuse (and keep) the sandbox primary")
    p.add_argument("--keep-sandbox", action="store_true", help="keep the sandbox primary for a later --reuse")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--commits", type=int, default=2000, help="latency: commits per source")
    p.add_argument("--clients", default="1,10,50,100", help="capacity: client counts")
    p.add_argument("--size-mb", type=float, default=300, help="binlog of a new sandbox primary (MiB)")
    p.add_argument("--min-mb", type=float, default=100)
    p.add_argument("--name", default="benchcap", help="the shared sandbox's name")
    p.add_argument("--port", type=int, default=26316, help="the sandbox primary's port (0: a free one)")
    p.add_argument("--sandbox-dir", default="/tmp/binlog-relay-bench/sandbox")
    p.add_argument("--workdir", default="/tmp/binlog-relay-bench/suite")
    args = p.parse_args(argv)
    args.scenarios = [s for s in args.scenarios.split(",") if s]
    if args.port == 0:
        args.port = free_port()
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    missing = [] if args.smoke or args.from_json else missing_compiled_modules()
    if missing:
        p.error(f"{', '.join(missing)} not built here, so the relay would run its loops in Python and every "
                "figure would measure those; build them first: pip install -e . (or python3 setup.py build_ext "
                "--inplace). A fresh git worktree or clone has none.")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    notes = Path(args.notes).read_text() if args.notes else None

    def results() -> dict[str, Any]:
        return json.loads(Path(args.from_json).read_text()) if args.from_json else run_suite(args)

    def written(found: dict[str, Any]) -> None:
        path = write(found, Path(args.out), notes)
        log(f"written: {path}, {path.parent / ASSETS / 'benchmarks.json'}")

    return run_main(results, written)


if __name__ == "__main__":
    sys.exit(main())
