"""MySQL rows in the change pipeline (issue 12 section 4), on binlog files MySQL 8.0-9.6 wrote
(tests/fixtures/mysql). Values are checked against the fixtures' documented values
(tests/fixtures/mysql/README.md) and otherwise against independent decoders: python-mysql-replication
(its own event classes, fed the same event bytes) and `mariadb-binlog --verbose`; never against this
project's own output."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import zstandard
from pymysql.protocol import MysqlPacket
from pymysqlreplication import row_event as pmr_rows
from pymysqlreplication.json_binary import JsonDiff as PmrJsonDiff
from pymysqlreplication.packet import BinLogPacketWrapper

from relay.binlog import events as ev
from relay.pipeline.jsonform import row_json
from relay.pipeline.read import iter_changes
from relay.rows import coltypes as ct
from relay.rows.tablemap import parse_table_map
from tests.support.binlogs import file_events

MYSQL = Path(__file__).resolve().parent.parent / "fixtures" / "mysql"


def changes(name: str) -> list:
    return [c for c in iter_changes(MYSQL / name) if c.op in ("insert", "update", "delete")]


# --------------------------------------------------------------------------- independent decoders


class _OfflineConnection:
    """What python-mysql-replication asks of its control connection while decoding events
    that carry full row metadata: the charset and the server kind. No query is sent."""

    charset = "utf8mb4"

    def _get_dbms(self) -> str:
        return "mysql"


def pmr_events(events: list[tuple[int, bytes]], crc: bool = True) -> list[tuple[int, object]]:
    """python-mysql-replication's decoding of these events (its BinLogPacketWrapper on each
    event as a dump packet would carry it)."""
    table_map: dict = {}
    allowed = set(BinLogPacketWrapper._BinLogPacketWrapper__event_map.values())
    out = []
    for offset, event in events:
        wrapped = BinLogPacketWrapper(MysqlPacket(b"\x00" + event, "utf8"), table_map, _OfflineConnection(), (8, 0, 0),
                                      crc, allowed, None, None, None, None, False, False, False, True, False)
        if isinstance(wrapped.event, pmr_rows.TableMapEvent):
            table_map[wrapped.event.table_id] = wrapped.event.get_table()
        out.append((offset, wrapped.event))
    return out


def pmr_rows_of(name: str) -> list[tuple[int, list]]:
    return [(offset, e.rows) for offset, e in pmr_events(file_events((MYSQL / name).read_bytes()))
            if isinstance(e, pmr_rows.RowsEvent)]


def plain(value):
    """python-mysql-replication's JSON (bytes keys and strings) as str."""
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def mariadb_binlog_rows(name: str) -> list[list[str]]:
    """The @n=value texts of each row image mariadb-binlog --verbose prints, in order."""
    out = subprocess.run([shutil.which("mariadb-binlog") or "mysqlbinlog", "-vv", "--base64-output=decode-rows",
                          str(MYSQL / name)], capture_output=True, text=True, check=True).stdout
    images, current = [], None
    for line in out.splitlines():
        if line in ("### SET", "### WHERE"):
            current = []
            images.append(current)
        elif line.startswith("###   @") and current is not None:
            current.append(re.match(r"###   (@\d+=.*?) /\*", line).group(1))
    return images


# --------------------------------------------------------------------------- documented values


def test_enum_set_and_long_strings_with_full_metadata():
    rows = changes("mysql-enum-string-set.000001")
    assert [c.op for c in rows] == ["insert", "update", "delete"]
    tm = rows[0].table_map
    enum_names, set_names = tm.enum_values[2], tm.set_values[3]
    long300 = rows[0].after["f2"]
    # the README's "300-character string" (VARCHAR(300)) holds 298: its length prefix says so
    raw = (MYSQL / "mysql-enum-string-set.000001").read_bytes()
    assert len(long300) == int.from_bytes(raw[raw.index(b"0123456789" * 10) + 100:][:2], "little") == 298
    documented_insert = ("0123456789" * 10, long300, enum_names[1 - 1],
                         frozenset(set_names[i] for i in (0, 2)), "0123456789")  # ENUM 1, SET 0b101
    documented_update = ("field1", "field_2", enum_names[2 - 1],
                         frozenset(set_names[i] for i in (1, 3)), long300)  # ENUM 2, SET 0b1010
    assert tuple(rows[0].after.values()) == documented_insert
    assert tuple(rows[1].before.values()) == documented_insert
    assert tuple(rows[1].after.values()) == documented_update
    assert tuple(rows[2].before.values()) == documented_update and rows[2].after is None
    # python-mysql-replication reads the same names from the same metadata
    theirs = pmr_rows_of("mysql-enum-string-set.000001")
    assert theirs[0][1][0]["values"] == {**rows[0].after, "f4": set(rows[0].after["f4"])}
    assert '"f3":"var1"' in row_json(rows[0].after, tm) or enum_names[0] in row_json(rows[0].after, tm)


def test_enum_and_set_without_full_metadata_are_index_and_bit_mask():
    """The same table map with its optional metadata cut off, as binlog_row_metadata=MINIMAL
    leaves ENUM/SET names out: the values are the documented index and bit mask."""
    events = file_events((MYSQL / "mysql-enum-string-set.000001").read_bytes())
    fde = ev.parse_format_description(events[0][1])
    tm_event = next(e for _, e in events if e[4] == ev.TABLE_MAP_EVENT)
    body = tm_event[ev.HEADER_LEN:-4]
    # optional metadata starts after the null bitmap: find it by reading the fixed part
    db_len = body[8]
    pos = 8 + 1 + db_len + 1
    pos += 1 + body[pos] + 1
    ncols = body[pos]
    pos += 1 + ncols
    meta_len = body[pos]
    pos += 1 + meta_len + (ncols + 7) // 8
    bare = parse_table_map(body[:pos], fde.post_header_len(19), flavor="mysql")
    assert bare.enum_values is None and bare.set_values is None
    rows_event = next(e for _, e in events if e[4] == 30)
    from relay.rows.rows import parse_rows_event

    row = parse_rows_event(30, rows_event[ev.HEADER_LEN:-4], bare, fde.post_header_len(30)).rows[0]
    assert row["col_2"] == 1 and row["col_3"] == 0b101  # the documented ENUM index 1, SET bits 0b101
    assert row_json(row, bare).count('"col_2":1') == 1 and '"col_3":5' in row_json(row, bare)


def test_bit_columns():
    rows = changes("mysql_type_bit.000001")
    assert rows and all(tuple(c.after.values()) == (0b100, "foo", 0b100000) for c in rows)


def test_minimal_row_metadata_unsigned_int_and_collation():
    [change] = changes("minimal_row_metadata.000001")
    tm = change.table_map
    assert not tm.has_column_names  # MINIMAL: no names, columns by position
    assert change.after["col_4"] == 3230202323  # column @4 (1-based: the 4th after @1 .. col_4 is @5?)
    assert tm.unsigned[4] is True
    assert tm.column_charsets[2] == 255  # utf8mb4_0900_ai_ci


# --------------------------------------------------------------------------- mariadb-binlog --verbose


def test_negative_time_beyond_24_hours():
    [change] = changes("time_issue.000001")
    assert mariadb_binlog_rows("time_issue.000001") == [["@1='-507:48:27'"]]
    assert row_json(change.after, change.table_map) == '{"col_0":"-507:48:27"}'


def test_invisible_columns_values_and_visibility():
    rows = changes("binlog-invisible-columns.000001")
    theirs = mariadb_binlog_rows("binlog-invisible-columns.000001")
    images = []
    for c in rows:
        images += [img for img in (c.before, c.after) if img is not None]
    assert len(images) == len(theirs)
    for mine, text in zip(images, theirs):
        for value, at in zip(mine.values(), text):
            shown = at.split("=", 1)[1]
            if value is None:
                assert shown == "NULL"
            elif isinstance(value, bytes):
                assert shown == "'" + "".join(chr(b) if 32 <= b < 127 else f"\\x{b:02x}" for b in value) + "'"
            elif isinstance(value, int):
                assert shown.split(" ")[0] == str(value)
            else:
                assert shown == f"'{value}'"
    ddl = next(c.query for c in iter_changes(MYSQL / "binlog-invisible-columns.000001") if c.op == "ddl"
               and "CREATE TABLE" in c.query)
    columns = ddl[ddl.index("(") + 1:ddl.rindex(")")].split(",")
    invisible = {part.split()[0] for part in columns if "INVISIBLE" in part.split()}
    tm = rows[0].table_map
    assert invisible and tm.column_visibility == tuple(name not in invisible for name in tm.column_names)


def test_a_hidden_generated_column_is_not_in_the_rows():
    # a MySQL relay log, read as a file: the functional index's hidden column is never logged
    [change] = changes("rpl_unfiltered_hidden_gcol.000001")
    assert mariadb_binlog_rows("rpl_unfiltered_hidden_gcol.000001") == [["@1=1", "@3='1'"]]
    assert change.after == {"col_0": 1, "col_2": "1"}


# --------------------------------------------------------------------------- python-mysql-replication


def test_binary_json_documents_match_python_mysql_replication():
    mine = changes("json.binlog.000001")
    theirs = [r for _, rows in pmr_rows_of("json.binlog.000001") for r in rows]
    full = [(c, r) for c, r in zip(mine, theirs) if "values" in r or "before_values" in r]
    assert len(mine) == len(theirs) == 18
    for change, row in full[:12]:  # the partial updates are compared below
        if change.op == "insert":
            assert list(change.after.values()) == [plain(v) for v in row["values"].values()]
        else:
            assert list(change.before.values()) == [plain(v) for v in row["before_values"].values()]
            assert list(change.after.values()) == [plain(v) for v in row["after_values"].values()]


def test_partial_json_updates():
    """PARTIAL_UPDATE_ROWS_EVENT: the diffs match python-mysql-replication's reading; applied to
    the row's previous document they give the age MySQL's own generated column holds."""
    mine = changes("json.binlog.000001")
    partial = mine[-6:]
    theirs = [r for _, rows in pmr_rows_of("json.binlog.000001") for r in rows][-6:]
    previous = {c.after["col_0"]: c.after["col_1"] for c in mine[:-6] if c.op == "update"}
    for change, row in zip(partial, theirs):
        key = change.before["col_0"]
        assert change.before == {"col_0": row["before_values"]["UNKNOWN_COL0"]}
        update = change.after["col_1"]
        assert isinstance(update, ct.JsonPartialUpdate)  # MINIMAL: no before document to apply to
        their_diff = row["after_values"]["UNKNOWN_COL1"]
        assert isinstance(their_diff, PmrJsonDiff)
        [diff] = update.diffs
        assert (diff.operation, diff.path.encode(), diff.value) == (
            their_diff.op.name.upper(), their_diff.path, their_diff.value)
        applied = ct.apply_json_diffs(previous[key], update.diffs)
        assert applied["age"] == change.after["col_3"]  # the generated column age, computed by MySQL
        assert {k: v for k, v in applied.items() if k != "age"} == {k: v for k, v in previous[key].items()
                                                                   if k != "age"}
        assert '"$json_diffs":[{"op":"REPLACE","path":"$.age","value":' in row_json(change.after, change.table_map)


def test_json_opaque_values_match_python_mysql_replication_where_it_decodes_them():
    import datetime as dt
    from decimal import Decimal

    mine = changes("json-opaque.binlog")
    events = file_events((MYSQL / "json-opaque.binlog").read_bytes())
    compared = 0
    for change in mine:
        rows_events = [(o, e) for o, e in events if o == change.pos]
        table_maps = [(o, e) for o, e in events if e[4] == ev.TABLE_MAP_EVENT and o < change.pos][-1:]
        try:
            [(_, decoded)] = [x for x in pmr_events(table_maps + rows_events) if x[0] == change.pos]
            theirs = plain(next(iter(decoded.rows[0]["values"].values())))  # rows decode lazily
        except ValueError:  # it cannot hold a TIME over 24 hours (datetime.time): not compared
            assert change.after["a"]["c"] > dt.timedelta(hours=24)
            continue
        ours = change.after["a"]
        first = next(iter(ours.values()))
        if type(first) is dt.date:  # it gives a JSON DATE as a datetime at midnight
            theirs = {k: v.date() for k, v in theirs.items() if v.time() == dt.time(0)}
        if isinstance(first, Decimal):
            assert {k: Decimal(str(v)) for k, v in theirs.items()} == ours
        else:
            assert theirs == plain(ours), (theirs, ours)  # opaque bytes (a BIT) compared as text on both sides
        compared += 1
    assert compared >= 6


def test_compressed_transaction():
    mine = changes("transaction_compression.000001")
    events = file_events((MYSQL / "transaction_compression.000001").read_bytes())
    payload_offset, payload = next((o, e) for o, e in events if e[4] == ev.TRANSACTION_PAYLOAD_EVENT)
    # decompressed here on its own: the zstd frame is the tail of the event before its CRC32
    frame = payload[payload.index(b"\x28\xb5\x2f\xfd"):-4]
    data = zstandard.ZstdDecompressor().decompressobj().decompress(frame)
    inner, pos = [], 0
    while pos < len(data):
        length = struct.unpack_from("<I", data, pos + 9)[0]
        inner.append((pos, data[pos:pos + length]))
        pos += length
    assert [e[4] for _, e in inner] == [ev.QUERY_EVENT, ev.TABLE_MAP_EVENT, 30, ev.XID_EVENT]  # documented
    [(_, write)] = [(o, e) for o, e in pmr_events(inner, crc=False) if isinstance(e, pmr_rows.WriteRowsEvent)]
    assert [c.after for c in mine] == [{f"col_{k}": v for k, v in enumerate(r["values"].values())}
                                      for r in write.rows]
    assert all(c.pos == payload_offset and c.table == write.table for c in mine)


# --------------------------------------------------------------------------- VECTOR


def test_vector_columns():
    """No independent decoder knows VECTOR (mariadb-binlog and python-mysql-replication stop at it):
    the lengths are checked against the DDL's VECTOR(n) and the table map's dimensionality."""
    all_changes = list(iter_changes(MYSQL / "vector.binlog"))
    ddl = {m.group(1): [int(n) for n in re.findall(r"VECTOR\((\d+)\)", c.query)]
           for c in all_changes if c.op == "ddl" for m in [re.search(r"CREATE TABLE (\w+)", c.query)] if m}
    rows = [c for c in all_changes if c.op == "insert"]
    assert rows
    for change in rows:
        tm = change.table_map
        vectors = [i for i, t in enumerate(tm.column_types) if t == ct.VECTOR]
        assert [tm.vector_dimensions[i] for i in vectors] == ddl[tm.table]
        for i, n in zip(vectors, ddl[tm.table]):
            value = change.after[tm.column_names[i]]
            assert isinstance(value, tuple) and len(value) == n
            assert all(struct.unpack("<f", struct.pack("<f", x))[0] == x for x in value)  # float32 values
        assert row_json(change.after, tm)
