"""The numbers the C modules share with their Python code are the same on both sides.

Each C module repeats a few of its Python side's codes: the column kinds of the row reader
(coltypes/base.py's R_* and rows/coltypes/_rowread.c), the JSON writer's kinds (jsonform's K_*
and pipeline/_jsontext.c), the event types, header size, flag and CRC32 residue the loops of
binlog/_scan.c read, and how many events outside a group a span remembers.  The C values are
read here from the sources' #defines and enums, so a code changed on one side only fails
this test instead of reading rows as the wrong type or writing spans that differ by who wrote
them.  The span walker's group modes and kinds (M_*, K_* of _scan.c) are left out: they never
cross to Python, whose walker numbers its own state as it likes."""

from __future__ import annotations

import re
from pathlib import Path

from relay.binlog import events as ev
from relay.gtid import spans
from relay.pipeline import jsonform
from relay.replication import stream
from relay.rows.coltypes import base

ROOT = Path(__file__).resolve().parents[2]
SCAN = ROOT / "relay" / "binlog" / "_scan.c"
ROWREAD = ROOT / "relay" / "rows" / "coltypes" / "_rowread.c"
JSONTEXT = ROOT / "relay" / "pipeline" / "_jsontext.c"

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_NUMBER = r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*"


def c_constants(path: Path) -> dict[str, int]:
    """The integer #defines and enum members of a C source (an enum member without a value
    is the one before it plus one, the first 0)."""
    code = _COMMENTS.sub(" ", path.read_text())
    values = {name: int(value, 0) for name, value in
              re.findall(rf"^\s*#\s*define\s+(\w+)\s+{_NUMBER}\s*$", code, re.M)}
    for body in re.findall(r"\benum\b\s*\w*\s*\{(.*?)\}", code, re.S):
        value = -1
        for member in filter(None, (part.strip() for part in body.split(","))):
            name, _, given = (part.strip() for part in member.partition("="))
            value = int(re.fullmatch(_NUMBER, given).group(1), 0) if given else value + 1
            assert name not in values, f"{path.name}: {name} defined twice"
            values[name] = value
    return values


def python_constants(module: object, prefix: str) -> dict[str, int]:
    return {name: value for name, value in vars(module).items()
            if name.startswith(prefix) and type(value) is int}


def test_the_parser_reads_defines_and_enums(tmp_path):
    source = tmp_path / "x.c"
    source.write_text("#define A 0x20u  /* a comment */\n#define F(x) (x)\n#define B 7\n"
                      "enum { C = 2, D, /* E = 9, */ G };\nenum name { H };\n")
    assert c_constants(source) == {"A": 0x20, "B": 7, "C": 2, "D": 3, "G": 4, "H": 0}


def test_row_reader_kinds():
    """base.py's R_* are the kinds _rowread.c reads a column by (the first of each compiled
    tuple), one for one; R_KINDS, the C side's bound, is one past the last."""
    c = c_constants(ROWREAD)
    kinds = {name: value for name, value in c.items() if name.startswith("R_") and name != "R_KINDS"}
    assert kinds == python_constants(base, "R_")
    assert c["R_KINDS"] == max(kinds.values()) + 1


def test_json_text_kinds():
    """jsonform's K_* are the kinds _jsontext.c writes a column's JSON text by, K_NULLABLE the
    bit or-ed into them; K_KINDS, the C side's bound, is one past the last and below the bit."""
    c = c_constants(JSONTEXT)
    kinds = {name: value for name, value in c.items()
             if name.startswith("K_") and name not in ("K_KINDS", "K_NULLABLE")}
    python = python_constants(jsonform, "K_")
    assert c["K_NULLABLE"] == python.pop("K_NULLABLE")
    assert kinds == python
    assert c["K_KINDS"] == max(kinds.values()) + 1 <= c["K_NULLABLE"]


# _scan.c's name of each event type it reads -> events.py's
SCAN_EVENT_TYPES = {
    "T_QUERY": "QUERY_EVENT", "T_INTVAR": "INTVAR_EVENT", "T_RAND": "RAND_EVENT", "T_USER_VAR": "USER_VAR_EVENT",
    "T_FDE": "FORMAT_DESCRIPTION_EVENT", "T_XID": "XID_EVENT", "T_TABLE_MAP": "TABLE_MAP_EVENT",
    "T_MYSQL_GTID": "GTID_LOG_EVENT", "T_ANONYMOUS_GTID": "ANONYMOUS_GTID_LOG_EVENT",
    "T_XA_PREPARE": "XA_PREPARE_LOG_EVENT", "T_PAYLOAD": "TRANSACTION_PAYLOAD_EVENT",
    "T_TAGGED_GTID": "GTID_TAGGED_LOG_EVENT", "T_ANNOTATE_ROWS": "ANNOTATE_ROWS_EVENT", "T_GTID": "GTID_EVENT",
}


def test_scan_event_types():
    """Every event type the span walker of _scan.c names has events.py's number (a type added
    there must be added to SCAN_EVENT_TYPES, with its Python name)."""
    c = c_constants(SCAN)
    named = {name: value for name, value in c.items() if name.startswith("T_")}
    assert set(named) == set(SCAN_EVENT_TYPES)
    assert named == {name: getattr(ev, SCAN_EVENT_TYPES[name]) for name in named}


def test_scan_event_layout():
    """What the ingest scan, the serve framer and the span walker of _scan.c assume of an event
    is what events.py, stream.py and spans.py say."""
    c = c_constants(SCAN)
    assert c["EVENT_HEADER"] == ev.HEADER_LEN
    assert c["ARTIFICIAL_FLAG"] == ev.LOG_EVENT_ARTIFICIAL_F
    assert c["CRC_RESIDUE"] == ev.CRC32_RESIDUE == stream._CRC_RESIDUE
    assert c["SPAN_LOOSE"] == spans.LOOSE_MAX
