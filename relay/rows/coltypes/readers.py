"""The generated row readers (sans-IO): Python source written and compiled per row image and
pattern of NULLs, reading each column by its type's inline plan (registry.inline_plan) or, for
the rare types without one, by calling its decoder. relay.rows.rows decides when to build them.

When the optional C module ``_rowread`` is built (setup.py), compile_body and compile_run give
the compiled reader of the image (compiled_reader): the same values, read in C column by
column by each type's compiled kind (registry.compiled_kind) or its decoder, and any row it
cannot read plainly handed, from its first byte, to the generated Python reader it wraps."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .base import R_CALL, Inline, Truncated, inline_same
from .registry import INLINE_GLOBALS, compiled_kind, inline_plan

try:
    import relay.rows.coltypes._rowread as _rowread
except ImportError:  # not built (no C compiler where the package was installed): Python only
    _rowread = None

if TYPE_CHECKING:
    from ..tablemap import TableMap

Row = dict[str, Any]
# (buf, pos after the null bitmap, null bits) -> (row dict, next pos)
Body = Callable[[bytes, int, int], tuple[Row, int]]
# (buf, pos of a null bitmap, end of the rows, list.append) -> pos of the first row not read
Run = Callable[[bytes, int, int, Callable[[Row], None]], int]


def compile_body(tm: TableMap, idx: tuple[int, ...], nulls: int | None) -> Body:
    """The reader of one row image after its null bitmap, (buf, pos, nulls) -> (row dict,
    next pos): python_body's, in C when the C module is built (compiled_reader)."""
    body = python_body(tm, idx, nulls)
    return body if _rowread is None else compiled_reader(tm, idx, nulls, body, run=False)


def compile_run(tm: TableMap, idx: tuple[int, ...], nulls: int | None) -> Run:
    """The bulk reader of an image with one null bitmap byte, (buf, pos, stop, append) -> pos:
    python_run's, in C when the C module is built (compiled_reader)."""
    run = python_run(tm, idx, nulls)
    return run if _rowread is None else compiled_reader(tm, idx, nulls, run, run=True)


def compiled_reader(tm: TableMap, idx: tuple[int, ...], nulls: int | None, fallback: Any, *, run: bool) -> Any:
    """The compiled reader (_rowread.Reader) of the image of tm whose columns are idx, for the
    pattern nulls (None: each bit tested), in the form of fallback: a run (python_run's
    signature) or a body (python_body's). fallback is the generated Python reader of the
    same image, pattern and form: the compiled one hands it any row it does not read
    (bytes running out, a value Python cannot hold, an exception), which it reads or
    raises for as always. Returns fallback itself for a body without a pattern of more
    than 64 columns; raises AttributeError when the C module is not built."""
    if nulls is None and len(idx) > 64:
        return fallback
    unsigned = tm.unsigned or (False,) * tm.column_count
    charsets = tm.column_charsets or (None,) * tm.column_count
    columns = []
    for i in idx:
        kind = compiled_kind(tm.column_types[i], tm.column_meta[i], unsigned=unsigned[i], charset=charsets[i])
        columns.append((R_CALL, 0, 0, tm.decoders[i]) if kind is None else kind)
    pattern = None if nulls is None else bytes(nulls >> k & 1 for k in range(len(idx)))
    return _rowread.Reader(run, tuple(tm.column_names[i] for i in idx), tuple(columns), pattern,
                           fallback)


def python_body(tm: TableMap, idx: tuple[int, ...], nulls: int | None) -> Body:
    """Generate the reader of one row image after its null bitmap: (buf, pos, nulls) ->
    (row dict, next pos).

    nulls: the pattern of NULLs the reader is for (its NULL columns read nothing and the
    others one straight line each), or None for a reader that tests every column's bit.
    Columns with a coltypes.inline_plan cost no call: their fixed-width heads (numbers,
    temporal values, decimal digit groups, length prefixes) are read by one
    Struct.unpack_from per run of adjacent columns. Column names, decoders and other
    objects enter the generated code as globals of its namespace, never as source text.
    """
    body, row, checks_end, env = _row_code(tm, idx, nulls)
    lines = [
        "def read(buf, pos, nulls):",
        *_indent(body, 4),
        *(["    if pos > len(buf):", "        _short_row(pos, buf)"] if checks_end else []),
        f"    return {row}, pos",
    ]
    return _compile(tm, lines, env, "read")


def python_run(tm: TableMap, idx: tuple[int, ...], nulls: int | None) -> Run:
    """Generate the bulk reader of an image with one null bitmap byte: (buf, pos, stop,
    append) -> pos. It appends the rows from pos on while they have the pattern nulls
    (None: any pattern, each column's bit tested) and returns where it stopped. The loop
    in the generated code saves a call and a (row, pos) tuple per row, and one bounds
    check at the end covers every row: a row read past the end of buf ends the loop."""
    body, row, checks_end, env = _row_code(tm, idx, nulls)
    # bits past the present columns are not NULL flags (no mask needed for 8 columns)
    bits = f"buf[pos] & {(1 << len(idx)) - 1}" if len(idx) < 8 else "buf[pos]"
    head = (["    while pos < stop:", f"        nulls = {bits}"] if nulls is None
            else [f"    while pos < stop and ({bits}) == {nulls}:"])
    lines = [
        "def run(buf, pos, stop, append):",
        *head,
        "        pos += 1",
        *_indent(body, 8),
        f"        append({row})",
        *(["    if pos > len(buf):", "        _short_row(pos, buf)"] if checks_end else []),
        "    return pos",
    ]
    return _compile(tm, lines, env, "run")


def _row_code(tm: TableMap, idx: tuple[int, ...], nulls: int | None
              ) -> tuple[list[str], str, bool, dict[str, Any]]:
    """The lines reading one row image after its null bitmap (buf, pos and, for nulls None,
    the bits in nulls), the row dict's expression, whether pos may pass the end of buf
    unnoticed (a length-prefixed part or a decoder call), and the globals they use."""
    unsigned = tm.unsigned or (False,) * tm.column_count
    charsets = tm.column_charsets or (None,) * tm.column_count
    env: dict[str, Any] = dict(INLINE_GLOBALS, _short_row=_short_row)
    plans = []
    for k, i in enumerate(idx):
        plan = inline_plan(tm.column_types[i], tm.column_meta[i], unsigned=unsigned[i],
                              charset=charsets[i])
        plans.append(plan)
        env[f"n{k}"] = tm.column_names[i]
        env[f"d{k}"] = tm.decoders[i]
        for key, value in (plan.consts.items() if plan else ()):
            env[f"c{k}_{key}"] = value
    structs: list[Callable] = []
    body: list[str] = []
    if nulls is None:
        for k, plan in enumerate(plans):
            body += [f"if nulls >> {k} & 1:", f"    v{k} = None", "else:",
                     *_indent(_column_lines([(k, plan)], structs), 4)]
    else:
        body = _column_lines([(k, p) for k, p in enumerate(plans) if not nulls >> k & 1], structs)
    values = [f"v{k}" if nulls is None or not nulls >> k & 1 else "None" for k in range(len(idx))]
    for j, unpack in enumerate(structs):
        env[f"s{j}"] = unpack
    row = f"{{{', '.join(f'n{k}: {v}' for k, v in enumerate(values))}}}"
    return body, row, any(p is None or p.reads_on for p in plans), env


def _compile(tm: TableMap, lines: list[str], env: dict[str, Any], name: str) -> Any:
    exec(compile("\n".join(lines), f"<row reader {tm.database}.{tm.table}>", "exec"), env)
    return env[name]


def _column_lines(columns: list[tuple[int, Inline | None]], structs: list[Callable]) -> list[str]:
    """Lines reading these columns in order into v<k>; the fixed-width heads of adjacent
    planned columns share one unpack (a struct has one byte order for all its codes,
    so a run ends where the order changes), columns without a plan call their decoder."""
    lines: list[str] = []
    run: list[tuple[int, Inline]] = []
    order = ""

    def flush() -> None:
        if not run:
            return
        temps = [[f"t{k}_{j}" for j in range(len(p.codes))] for k, p in run]
        for (k, p), names in zip(run, temps):
            if p.render is inline_same:
                names[0] = f"v{k}"  # a plain number: unpack straight into the value
        codes = "".join(p.codes for _, p in run)
        if codes == "B":  # a lone unsigned byte (a short length prefix): indexing beats a call
            lines.append(f"{temps[0][0]} = buf[pos]")
            lines.append("pos += 1")
        else:
            st = struct.Struct((order or "<") + codes)
            lines.append(f"{''.join(f'{t}, ' for names in temps for t in names)}= s{len(structs)}(buf, pos)")
            lines.append(f"pos += {st.size}")
            structs.append(st.unpack_from)
        for (k, p), names in zip(run, temps):
            if p.render is not inline_same:
                lines.extend(p.render(f"v{k}", names, f"c{k}_"))
        run.clear()

    for k, plan in columns:
        if plan is None:
            flush()
            lines.append(f"v{k}, pos = d{k}(buf, pos)")
            continue
        if plan.endian and order and plan.endian != order:
            flush()
        if not run:
            order = ""
        run.append((k, plan))
        order = order or plan.endian
        if plan.reads_on:
            flush()  # the variable part starts where this run's heads end
    flush()
    return lines


def _indent(lines: list[str], width: int) -> list[str]:
    return [" " * width + line for line in lines]


def _short_row(end: int, buf: bytes) -> None:
    raise Truncated(f"row needs bytes up to offset {end}, data ends at {len(buf)}")

