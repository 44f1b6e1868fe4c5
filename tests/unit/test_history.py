"""The index of the stored history: spans (relay/gtid/spans.py), their files (relay/storage/
history.py), and GTID starts that jump with them (GtidStart.seek, skip_block).

Binlog files here are generated (hypothesis): groups of several domains and servers, standalone
statements, transactions ending in XID or COMMIT, a ROLLBACK, loose events between groups, with
and without CRC32.  The reference for every figure is a plain walk of the events one by one."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from relay.binlog import events as ev
from relay.gtid.gtid import BinlogState, Gtid
from relay.gtid.spans import CompiledSpanWalker, PySpanWalker, Span, apply_span, span_from_json, span_to_json
from relay.replication.gtidstart import GtidStart, GtidStartError
from relay.replication.stream import Segment
from relay.storage.gtidindex import GtidIndex
from relay.storage.history import INDEX_DIR, HistoryIndex, sidecar_path, walk_file
from relay.storage.relaylog import RelayLog

NAME = "mysql-bin.000001"
TIME = 1_700_000_000


# ---------------------------------------------------------------------- generated binlog files


@dataclass(frozen=True)
class Group:
    domain: int
    server: int
    seq: int
    kind: str  # "xid", "commit", "ddl", "rollback"
    rows: int


def _fde(crc: bool) -> bytes:
    body = struct.pack("<H", 4) + b"10.11.0-MariaDB".ljust(50, b"\0") + struct.pack("<I", 0) + bytes([19])
    body += bytes(40) + bytes([1 if crc else 0])
    return body


class FileBuilder:
    """A binlog file's bytes, each event at its offset with log_pos its end (and its CRC32)."""

    def __init__(self, crc: bool) -> None:
        self.crc = crc
        self.data = bytearray(ev.BINLOG_MAGIC)
        self.events: list[tuple[int, bytes]] = []
        self.clock = TIME
        self.add(ev.FORMAT_DESCRIPTION_EVENT, _fde(crc), fde=True)

    def add(self, etype: int, body: bytes, server: int = 1, fde: bool = False) -> int:
        at = len(self.data)
        crc = self.crc or fde  # an FDE carries its algorithm and a CRC32 either way
        length = ev.HEADER_LEN + len(body) + (ev.CRC_LEN if crc else 0)
        self.clock += 1
        event = ev.HEADER.pack(self.clock, etype, server, length, at + length, 0) + body
        if crc:
            event = ev.with_checksum(event)
        self.data += event
        self.events.append((at, event))
        return at

    def query(self, text: bytes, server: int) -> None:
        self.add(ev.QUERY_EVENT, bytes(8) + bytes([2]) + bytes(4) + b"db\0" + text, server)

    def group(self, group: Group) -> None:
        standalone = group.kind == "ddl"
        self.add(ev.GTID_EVENT, struct.pack("<QIB", group.seq, group.domain, 1 if standalone else 0) + bytes(6),
                 group.server)
        if standalone:
            self.query(b"CREATE TABLE t (a INT)", group.server)
            return
        self.query(b"BEGIN", group.server)
        for _ in range(group.rows):
            self.add(ev.TABLE_MAP_EVENT, bytes(10), group.server)
            self.add(30, bytes(20), group.server)
        if group.kind == "xid":
            self.add(ev.XID_EVENT, bytes(8), group.server)
        else:
            self.query(group.kind.upper().encode(), group.server)

    def loose(self) -> None:
        self.add(ev.BINLOG_CHECKPOINT_EVENT, struct.pack("<I", 16) + b"mysql-bin.000001")


@st.composite
def binlog_files(draw: st.DrawFn) -> tuple[bytes, list[Group]]:
    crc = draw(st.booleans())
    builder = FileBuilder(crc)
    builder.add(ev.GTID_LIST_EVENT, struct.pack("<I", 0))
    builder.loose()
    seqs: dict[int, int] = {}
    groups = []
    for _ in range(draw(st.integers(1, 40))):
        domain = draw(st.sampled_from([0, 0, 0, 5, 7]))
        server = draw(st.sampled_from([1, 1, 2, 3]))
        step = draw(st.sampled_from([1, 1, 1, 2, -3]))  # a hole, or a lower seq_no (another server)
        seq = max(1, seqs.get(domain, 0) + step)
        seqs[domain] = max(seq, seqs.get(domain, 0))
        group = Group(domain, server, seq, draw(st.sampled_from(["xid", "xid", "commit", "ddl", "rollback"])),
                      draw(st.integers(0, 3)))
        groups.append(group)
        builder.group(group)
        if draw(st.integers(0, 9)) == 0:
            builder.loose()
    return bytes(builder.data), groups


def _walk(walker_class: type, data: bytes, interval: int, block: int) -> list[Span]:
    walker = walker_class(4, False)
    spans, pos = [], 4
    while pos < len(data):
        used = walker.walk_events(data[pos : pos + block], min(block, len(data) - pos), interval)
        if not used:
            length = int.from_bytes(data[pos + 9 : pos + 13], "little")
            used = walker.walk_events(data[pos : pos + length], length)
        pos += used
        if walker.clean_end - walker.span_start >= interval:
            spans.append(walker.take())
    spans.append(walker.take())
    return spans


def _state_one_by_one(data: bytes, end: int) -> BinlogState:
    state = BinlogState()
    pos = 4
    while pos < end:
        length = int.from_bytes(data[pos + 9 : pos + 13], "little")
        if data[pos + 4] == ev.GTID_EVENT and pos + length <= end:
            seq, domain = struct.unpack_from("<QI", data, pos + ev.HEADER_LEN)
            state.update(Gtid(domain, int.from_bytes(data[pos + 5 : pos + 9], "little"), seq))
        pos += length
    return state


# ---------------------------------------------------------------------- spans


@settings(max_examples=150, deadline=None)
@given(binlog_files(), st.sampled_from([1, 100, 700, 1 << 20]), st.sampled_from([19, 64, 300, 1 << 20]))
def test_the_compiled_walk_gives_the_spans_of_the_python_walk(file, interval, block):
    data, _ = file
    assert _walk(CompiledSpanWalker, data, interval, block) == _walk(PySpanWalker, data, interval, block)


@settings(max_examples=150, deadline=None)
@given(binlog_files(), st.sampled_from([1, 200, 1 << 20]))
def test_spans_add_up_to_the_state_of_every_gtid_one_by_one(file, interval):
    """At every span end, the spans folded into a state give the GTIDs walked one by one: the
    same last GTID per (domain, server), per domain, and the same GTID_LIST order."""
    data, groups = file
    spans = _walk(PySpanWalker, data, interval, 1 << 20)
    state = BinlogState()
    for span in spans:
        apply_span(state, span)
        expected = _state_one_by_one(data, span.end)
        assert state.gtid_list() == expected.gtid_list()
        assert state.most_recent() == expected.most_recent()
    assert spans[-1].end == len(data)
    assert sum(span.groups for span in spans) == len(groups)
    assert [span.start for span in spans[1:]] == [span.end for span in spans[:-1]]
    for span in spans:
        assert span_from_json(json.loads(json.dumps(span_to_json(span)))) == span


def test_a_span_names_its_groups_times_and_loose_events():
    builder = FileBuilder(crc=True)
    builder.loose()
    builder.group(Group(0, 1, 5, "xid", 1))
    builder.group(Group(0, 2, 3, "commit", 0))
    builder.loose()
    builder.group(Group(7, 1, 9, "ddl", 0))
    builder.group(Group(0, 1, 6, "xid", 2))
    data = bytes(builder.data)
    span = _walk(CompiledSpanWalker, data, 1 << 20, 1 << 20)[0]
    assert [(p.domain, p.server, p.count, p.lo, p.hi, p.last) for p in span.pairs] == [
        (0, 1, 2, 5, 6, 6), (0, 2, 1, 3, 3, 3), (7, 1, 1, 9, 9, 9)]
    assert span.last_gtid == Gtid(0, 1, 6)
    offsets = [at for at, _ in builder.events]
    assert span.loose == (offsets[0], offsets[1], offsets[1 + 1 + 4 + 1 + 2 + 1])  # FDE, checkpoints
    assert span.groups == 4 and span.end == len(data) and span.last_event_at == offsets[-1]
    assert span.first_ts == TIME + 3 and span.last_commit_ts == builder.clock
    assert span.last_gtid_at == offsets[-7]  # GTID, BEGIN, two table maps and rows, XID


# ---------------------------------------------------------------------- GTID starts that jump


def _dump(data: bytes, start: GtidStart, spans: list[Span] | None, crc: bool) -> tuple[list[object], BinlogState]:
    """What a dump does with the events after the FDE: the offsets of the events it sends and
    'list' where an artificial GTID_LIST goes, walking event by event (spans None) or jumping
    with the spans and passing skipped groups by skip_block, as downstream/dump.py does."""
    sent: list[object] = []
    pos = 4 + int.from_bytes(data[4 + 9 : 4 + 13], "little")

    def one(at: int) -> int:
        length = int.from_bytes(data[at + 9 : at + 13], "little")
        event = data[at : at + length]
        if start.accept(event, event[4], crc):
            sent.append(at)
        if start.take_fake_list():
            sent.append(("list", at + length, tuple(start.seen.gtid_list())))
        return at + length

    try:
        while pos < len(data):
            if spans is not None and start.pending:
                plan = start.seek(pos, spans)
                if plan is not None:
                    start.before_loose_events()
                    for at in plan.loose:
                        one(at)
                    start.jumped(plan)
                    pos = plan.target
                    continue
                used, _ = start.skip_block(data[pos:], len(data) - pos, crc)
                if used:
                    pos += used
                    continue
            pos = one(pos)
    except GtidStartError as refused:
        sent.append(("error", str(refused)))
    return sent, start.seen


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(binlog_files(), st.sampled_from([1, 150, 1 << 20]), st.data())
def test_a_gtid_start_that_jumps_sends_what_the_walk_sends(file, interval, draw):
    """Whatever the replica's position (a GTID of the file, one that is not in it, several
    domains), strict or not: the same events, artificial GTID_LISTs and errors, with the index
    as without it."""
    data, groups = file
    crc = data[4 + int.from_bytes(data[4 + 9 : 4 + 13], "little") - 5] == 1
    spans = _walk(PySpanWalker, data, interval, 1 << 20)
    pending = {}
    for domain in draw.draw(st.sets(st.sampled_from([0, 5, 7]))):
        known = [g for g in groups if g.domain == domain]
        if known and draw.draw(st.booleans()):
            chosen = draw.draw(st.sampled_from(known))
            pending[domain] = Gtid(domain, chosen.server, chosen.seq)
        else:
            pending[domain] = Gtid(domain, draw.draw(st.sampled_from([1, 2, 9])), draw.draw(st.integers(1, 40)))
    strict = draw.draw(st.booleans())
    empty = {domain for domain in pending if not any(g.domain == domain for g in groups)}
    state = _state_one_by_one(data, len(data))

    def start() -> GtidStart:
        return GtidStart(dict(pending), set(empty), strict, lambda: state)

    walked = _dump(data, start(), None, crc)
    jumped = _dump(data, start(), spans, crc)
    assert jumped[0] == walked[0]
    assert jumped[1].gtid_list() == walked[1].gtid_list()


def test_a_seek_needs_every_group_to_be_one_the_replica_has():
    builder = FileBuilder(crc=False)
    for seq in range(1, 20):
        builder.group(Group(0, 1, seq, "xid", 1))
    builder.group(Group(5, 1, 1, "xid", 0))
    for seq in range(20, 40):
        builder.group(Group(0, 1, seq, "xid", 1))
    data = bytes(builder.data)
    spans = _walk(PySpanWalker, data, 200, 100)
    assert len(spans) > 6
    first = spans[0].loose[0] + 1  # after the FDE
    plan = GtidStart({0: Gtid(0, 1, 30)}, set(), False, BinlogState).seek(first, spans)
    assert plan is not None and plan.target <= next(s.end for s in spans if 5 in s.domains()) - 1
    # waiting for server 2's GTID in domain 5, the replica skips server 1's group there too
    both = GtidStart({0: Gtid(0, 1, 30), 5: Gtid(5, 2, 7)}, set(), False, BinlogState).seek(first, spans)
    assert both is not None and both.target > plan.target
    assert both.target <= next(s.start for s in spans if any(p.hi >= 30 for p in s.pairs))
    assert GtidStart({0: Gtid(0, 1, 1)}, set(), False, BinlogState).seek(first, spans) is None


# ---------------------------------------------------------------------- the sidecar files


def _store(tmp_path: Path, data: bytes, interval: int, chunk: int = 997) -> RelayLog:
    """``data`` stored through ingest in segments of about ``chunk`` bytes, each ending at a group end."""
    relay_log = RelayLog(tmp_path, sync="none", index_interval=interval)
    relay_log.open()
    events = []
    pos = 4
    while pos < len(data):
        length = int.from_bytes(data[pos + 9 : pos + 13], "little")
        events.append((pos, data[pos : pos + length]))
        pos += length
    start, batch = 4, []
    from relay.binlog.groups import GroupTracker
    tracker = GroupTracker()
    for at, event in events:
        batch.append(memoryview(event))
        ends = tracker.ends_group(event[4], event)
        end = at + len(event)
        if ends and end - start >= chunk or end == len(data):
            relay_log.apply([Segment(NAME, start, batch, end - start, end, at, new_file=start == 4)])
            start, batch = end, []
    return relay_log


def _generated(groups: int = 300, crc: bool = True) -> bytes:
    builder = FileBuilder(crc)
    builder.add(ev.GTID_LIST_EVENT, struct.pack("<I", 0))
    for seq in range(1, groups + 1):
        builder.group(Group(seq % 3, 1 + seq % 2, seq, "xid" if seq % 5 else "ddl", seq % 4))
        if seq % 50 == 0:
            builder.loose()
    return bytes(builder.data)


def test_ingest_writes_the_spans_a_walk_of_the_file_finds(tmp_path):
    data = _generated()
    relay_log = _store(tmp_path, data, interval=2000)
    relay_log.close()
    written = RelayLog(tmp_path, sync="none", index_interval=2000)
    written.open()
    try:
        spans = written.history.spans(NAME)
        assert len(spans) > 10
        assert _each_is_the_walk_of_its_stretch(tmp_path / NAME, spans, len(data))
        assert sidecar_path(tmp_path, NAME).parent.name == INDEX_DIR
        for span in spans:
            assert GtidIndex(written).state_at_span_end(NAME, [s for s in spans if s.end <= span.end]) \
                .gtid_list() == _state_one_by_one(data, span.end).gtid_list()
    finally:
        written.close()


@pytest.mark.parametrize("damage", ["deleted", "flipped", "torn", "beyond the end", "stale offsets"])
def test_a_damaged_or_stale_sidecar_is_walked_again_from_the_file(tmp_path, damage):
    data = _generated()
    _store(tmp_path, data, interval=2000).close()
    sidecar = sidecar_path(tmp_path, NAME)
    lines = sidecar.read_bytes().splitlines(keepends=True)
    if damage == "deleted":
        sidecar.unlink()
    elif damage == "flipped":
        text = bytearray(b"".join(lines))
        text[len(text) // 2] ^= 0x10
        sidecar.write_bytes(bytes(text))
    elif damage == "torn":
        sidecar.write_bytes(b"".join(lines)[: -len(lines[-1]) // 2])
    else:
        raw = [json.loads(line.rpartition(b"\t")[0]) for line in lines]
        if damage == "beyond the end":  # a file cut back after a crash: the index says more
            with open(tmp_path / NAME, "r+b") as stored:
                stored.truncate(raw[len(raw) // 2]["span"][1])
        else:  # every span keeps its GTIDs and takes its neighbour's offsets
            for this, other in zip(raw[1:], raw[2:]):
                this["span"] = other["span"][:3] + this["span"][3:9] + other["span"][9:]
        sidecar.write_bytes(b"".join(_line(item) for item in raw))
    relay_log = RelayLog(tmp_path, sync="none", index_interval=2000)
    relay_log.open()
    try:
        spans = relay_log.history.spans(NAME)
        assert _each_is_the_walk_of_its_stretch(tmp_path / NAME, spans, relay_log.committed[1])
        state = GtidIndex(relay_log).binlog_state()
        assert state.gtid_list() == _state_one_by_one(data, relay_log.committed[1]).gtid_list()
    finally:
        relay_log.close()


def _each_is_the_walk_of_its_stretch(path: Path, spans: list[Span], end: int) -> bool:
    """The spans cover [4, end) and each is what a walk of its own stretch of the file finds."""
    assert [span.start for span in spans] == [4] + [span.end for span in spans[:-1]]
    assert spans[-1].end == end
    for span in spans:
        assert walk_file(path, span.start, span.end) == span
    return True


def _line(raw: dict) -> bytes:  # type: ignore[type-arg]
    import zlib

    text = json.dumps(raw, separators=(",", ":")).encode()
    return text + b"\t%08x\n" % zlib.crc32(text)


# ---------------------------------------------------------------------- the pipeline's GTID bounds


def test_the_pipelines_gtid_bounds_read_only_what_the_index_says_may_be_wanted(tmp_path):
    """since/until by GTID: the ranges planned leave out the stretches the index shows hold no
    wanted group, and the change rows read are those of reading everything and filtering."""
    from relay.pipeline import plan as pl
    from tests.unit.test_changes import make_data_dir, read_plan

    data = make_data_dir(tmp_path, ["full.binlog", "minimal.binlog"])
    files = ["mysql-bin.000001", "mysql-bin.000002"]
    history = HistoryIndex(data, lambda: files, lambda name: (data / name).stat().st_size, interval=1)
    for name in files:
        history.rebuild(name)
    everything = read_plan(pl.plan_ranges(data))
    seqs = sorted({int(row[2].split("-")[2]) for row in everything})
    assert len(seqs) > 20
    for low, high in [(seqs[5], None), (None, seqs[-6]), (seqs[10], seqs[12]), (seqs[-1], None)]:
        since = pl.parse_bound(f"0-1-{low}") if low is not None else None
        until = pl.parse_bound(f"0-1-{high}") if high is not None else None
        planned = pl.plan_ranges(data, since=since, until=until)
        wanted = [row for row in everything if (low is None or int(row[2].split("-")[2]) > low)
                  and (high is None or int(row[2].split("-")[2]) <= high)]
        assert read_plan(planned) == wanted
        whole = pl.plan_ranges(data).total_bytes
        assert planned.total_bytes < (whole / 4 if (low, high) == (seqs[10], seqs[12]) else whole), (low, high)


# ---------------------------------------------------------------------- MySQL GTID dumps


@pytest.mark.parametrize("fixture", ["binlog-invisible-columns.000001", "mysql-enum-string-set.000001",
                                     "binlog_transaction_with_GTID_TAG.000001", "mysql_type_bit.000001"])
def test_a_mysql_gtid_dump_jumps_only_over_groups_the_replica_has(fixture):
    """From every event start, whatever the replica has of the file's GTIDs: where the index
    lets a COM_BINLOG_DUMP_GTID dump jump to, walking event by event would have sent nothing."""
    from relay.gtid.mysqlgtid import ExcludedGroups, GtidSet, gtid_of_event
    from relay.gtid.spans import excluded_until
    from relay.storage.history import build_spans
    from tests.support.binlogs import file_events

    path = Path(__file__).resolve().parent.parent / "fixtures" / "mysql" / fixture
    events = file_events(path.read_bytes())
    spans = build_spans(path, 4, path.stat().st_size, 1)
    gtids = [g for _, e in events if (g := gtid_of_event(e)) is not None]
    assert len(gtids) >= 1
    jumps = 0
    for have in range(len(gtids) + 1):
        replica_has = GtidSet()
        for gtid in gtids[:have]:
            replica_has.add(gtid)
        for index, (position, _) in enumerate(events[1:], 1):
            target = excluded_until(replica_has, position, spans)
            if target is None:
                continue
            jumps += 1
            walk = ExcludedGroups(replica_has)
            for _, event in events[:index]:
                walk.accept(event)
            assert not [at for at, event in events[index:] if at < target and walk.accept(event)], (have, position)
    assert jumps


@settings(max_examples=100, deadline=None)
@given(binlog_files(), st.sampled_from([1, 150, 600]))
def test_spans_merged_are_the_walk_of_their_whole_stretch(file, interval):
    from relay.gtid.spans import merge_spans

    data, _ = file
    spans = _walk(PySpanWalker, data, interval, 1 << 20)
    assert merge_spans(spans) == _walk(PySpanWalker, data, 1 << 30, 1 << 20)[0]


# ---------------------------------------------------------------------- search


def _data_dir_of(tmp_path: Path, files: list[bytes], interval: int | None) -> tuple[Path, list[str]]:
    """Generated files in a data_dir, indexed every ``interval`` bytes (None: no index at all)."""
    names = [f"mysql-bin.{n:06d}" for n in range(1, len(files) + 1)]
    for name, data in zip(names, files):
        (tmp_path / name).write_bytes(data)
    (tmp_path / "binlog.index").write_text("".join(f"./{name}\n" for name in names))
    if interval is not None:
        history = HistoryIndex(tmp_path, lambda: names, lambda name: (tmp_path / name).stat().st_size, interval)
        for name in names:
            history.rebuild(name)
    return tmp_path, names


def _groups_walked(data_dir: Path, names: list[str]) -> list[tuple[str, int, int, str, int]]:
    """(file, pos, end, gtid, commit time) of every group, from the events one by one."""
    out = []
    for name in names:
        data = (data_dir / name).read_bytes()
        pos, opened = 4, None
        while pos < len(data):
            length = int.from_bytes(data[pos + 9 : pos + 13], "little")
            etype = data[pos + 4]
            if etype == ev.GTID_EVENT:
                seq, domain = struct.unpack_from("<QI", data, pos + ev.HEADER_LEN)
                opened = (pos, f"{domain}-{int.from_bytes(data[pos + 5 : pos + 9], 'little')}-{seq}")
            elif opened and (etype == ev.XID_EVENT
                             or (etype == ev.QUERY_EVENT and b"\0BEGIN" not in data[pos:pos + length])):
                out.append((name, opened[0], pos + length, opened[1], int.from_bytes(data[pos : pos + 4], "little")))
                opened = None
            pos += length
    return out


def _files_of_groups(count: int, per_file: int) -> list[bytes]:
    """Files of groups in two domains, each starting with the GTID_LIST of what came before."""
    files = []
    seq = 0
    clock = TIME
    state = BinlogState()
    for _ in range(count):
        builder = FileBuilder(crc=True)
        builder.clock = clock
        listed = state.gtid_list()
        builder.add(ev.GTID_LIST_EVENT, struct.pack("<I", len(listed)) + b"".join(
            struct.pack("<IIQ", g.domain_id, g.server_id, g.seq_no) for g in listed))
        for _ in range(per_file):
            seq += 1
            builder.group(Group(seq % 2 * 5, 1, seq, "ddl" if seq % 7 == 0 else "xid", 1))
            state.update(Gtid(seq % 2 * 5, 1, seq))
        clock = builder.clock + 10
        files.append(bytes(builder.data))
    return files


@pytest.mark.parametrize("interval", [None, 1, 300, 1 << 20])
def test_search_by_time_finds_the_last_transaction_committed_at_or_before(tmp_path, interval):
    from relay.storage.search import StoredHistory

    data_dir, names = _data_dir_of(tmp_path, _files_of_groups(4, 30), interval)
    walked = _groups_walked(data_dir, names)
    history = StoredHistory(data_dir)
    assert len(walked) == 120
    for moment in sorted({t for *_, t in walked} | {TIME, walked[-1][4] + 100}):
        found = history.at_time(moment)
        before = [g for g in walked if g[4] <= moment]
        if not before:
            assert found["transaction"] is None and found["next"]["pos"] == walked[0][1]
            continue
        expected = before[-1]
        transaction = found["transaction"]
        assert (transaction["file"], transaction["pos"], transaction["end_pos"], transaction["gtid"],
                transaction["commit_timestamp"]) == expected, moment
        after = walked[walked.index(expected) + 1 :]
        assert (found["next"] and found["next"]["pos"]) == (after[0][1] if after else None)
        domains = {}
        for g in walked[: walked.index(expected) + 1]:
            domains[g[3].split("-")[0]] = g[3]
        assert found["gtid_position"] == ",".join(domains[d] for d in sorted(domains, key=int))


@pytest.mark.parametrize("interval", [None, 300])
def test_search_by_gtid_finds_the_file_and_transaction(tmp_path, interval):
    from relay.storage.search import SearchError, StoredHistory

    data_dir, names = _data_dir_of(tmp_path, _files_of_groups(3, 20), interval)
    walked = _groups_walked(data_dir, names)
    history = StoredHistory(data_dir)
    for name, pos, end, gtid, _ in walked[::7]:
        found = history.holding(gtid)
        assert found["files"] == [name]
        assert (found["gtids"][0]["transaction"]["pos"], found["gtids"][0]["transaction"]["end_pos"]) == (pos, end)
    both = history.holding(f"{walked[0][3]},{walked[-1][3]}")
    assert both["files"] == [names[0], names[-1]]
    missing = history.holding("0-9-5")
    assert missing["files"] == [] and missing["gtids"][0]["transaction"] is None
    with pytest.raises(SearchError):
        history.holding("yesterday")


def test_building_missing_indexes_passes_over_a_file_purged_under_it(tmp_path):
    """The worker that indexes stored files at start must not stop the relay when retention purges
    a file it is about to read: it goes on with the next one."""
    import trio

    from tests.unit.test_changes import make_data_dir

    data = make_data_dir(tmp_path, ["full.binlog", "minimal.binlog"])
    files = ["mysql-bin.000001", "mysql-bin.000002", "mysql-bin.000003"]
    (data / "mysql-bin.000003").write_bytes((data / "mysql-bin.000002").read_bytes())
    history = HistoryIndex(data, lambda: files, lambda name: (data / name).stat().st_size, interval=1)
    (data / files[0]).unlink()  # listed, then purged before the worker reads it
    trio.run(history.index_stored_files)
    assert not sidecar_path(data, files[0]).exists()
    assert history.file_spans(files[1]).complete
