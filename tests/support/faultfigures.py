"""The fault suite's figures, written by the suite into RELIABILITY.md instead of copied there by hand.

Each fault test records its figures once it has checked them, through the ``fault_figures`` fixture of
tests/faults/conftest.py (a ``FigureRecorder``)::

    fault_figures("kill9", fault="kill -9 of the relay ...", injected=f"{KILL9_CYCLES} kills",
                  recovery=f"... {recovery}", memory=f"peak RSS {peak / 2**20:.1f} MiB",
                  data_lost="0", diverged="0")

The call prints the test's ``FAULTS <class>: ...`` line (``-s`` shows it) and keeps the figures; they
count only if the test passes.  At the end of the session the conftest prints every class's figures
(pytest's summary), and when ``FAULTS_FIGURES`` names a markdown file (scripts/faults.sh sets it to
RELIABILITY.md for the long run) it rewrites the file's generated block, between the lines
``BEGIN`` and ``END``: one row per fault class, the classes of this run replaced, those that did not
run (or failed) kept as they were, and each row saying which run it is from (``run_label``).  The
rest of the file is left byte for byte; the file is replaced in one rename, never left half written.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BEGIN = "<!-- fault-figures:begin -->"
END = "<!-- fault-figures:end -->"
FIGURES_ENV = "FAULTS_FIGURES"
HEADERS = ("Class", "Fault / input", "Test", "Run", "Injected", "Data lost", "Replicas diverged",
           "Time to recover (measured)", "Memory (measured)")
_CELL_SPLIT = re.compile(r"(?<!\\)\|")


@dataclass(frozen=True)
class Figures:
    """One fault class's figures from one run: the cells of its row (``-``: does not apply)."""

    fault_class: str  # the row's key, as the FAULTS line names it: kill9, network, disk_full[small] ...
    fault: str  # what is injected, in words
    test: str  # the test that measured it: file::name[parameters]
    run: str  # which run: run_label()
    injected: str  # how many faults (and what load)
    recovery: str  # the time to recover and what was checked
    memory: str = "-"
    data_lost: str = "-"
    diverged: str = "-"
    detail: str = ""  # more of the run, printed in the FAULTS line only

    def line(self) -> str:
        """The FAULTS line the test prints."""
        parts = [f"injected {self.injected}", f"data lost {self.data_lost}", f"replicas diverged {self.diverged}",
                 f"recovery: {self.recovery}", f"memory: {self.memory}"]
        if self.detail:
            parts.append(self.detail)
        return f"FAULTS {self.fault_class}: " + "; ".join(parts)

    def row(self) -> str:
        cells = (self.fault_class, self.fault, f"`{self.test}`", self.run, self.injected, self.data_lost,
                 self.diverged, self.recovery, self.memory)
        return "| " + " | ".join(_cell(c) for c in cells) + " |"


class FigureRecorder:
    """What the ``fault_figures`` fixture gives a test: call it once per fault class the test measures,
    after the checks (the figures are published only if the whole test passes)."""

    def __init__(self, test: str, run: str, pending: list[Figures]) -> None:
        self.test = test
        self.run = run
        self.pending = pending

    def __call__(self, fault_class: str, *, fault: str, injected: str, recovery: str, memory: str = "-",
                 data_lost: str = "-", diverged: str = "-", detail: str = "") -> Figures:
        """Record (and print as a ``FAULTS <fault_class>: ...`` line) one class's figures.

        ``fault_class``: the row's key in RELIABILITY.md (a new one adds a row; parametrized tests put
        the parameter in it, e.g. ``powercut[sync=none]``); ``fault``: what is injected, in words;
        ``injected``: how many, and the load; ``recovery``: the time to recover (measured) and what was
        checked; ``memory``: the relay's memory figures; ``data_lost``, ``diverged``: "0" when the test
        checked the replicas' data against the primary's, "-" when it has no replicas; ``detail``:
        anything more, for the printed line only.  Markdown is fine in every text; ``|`` is escaped."""
        figures = Figures(fault_class=fault_class, fault=fault, test=self.test, run=self.run, injected=injected,
                          recovery=recovery, memory=memory, data_lost=data_lost, diverged=diverged, detail=detail)
        print(f"\n{figures.line()}")
        self.pending.append(figures)
        return figures


def run_label(scale: str) -> str:
    """Which run measured a row: its size (the default suite's short counts or the long run's), the
    date, the machine's CPUs."""
    size = "long (`scripts/faults.sh`)" if scale == "long" else "default (`scripts/test.sh` counts)"
    return f"{size}, {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPUs"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|") or "-"


def _row_key(line: str) -> str:
    cells = _CELL_SPLIT.split(line.strip())
    return cells[1].strip() if len(cells) > 2 else ""


def rewrite_block(text: str, figures: Sequence[Figures], note: str) -> str:
    """``text`` (a markdown file) with its generated block rewritten: ``note``, then the table, its rows
    those of the block before (in their order) with the classes of ``figures`` replaced, new classes
    at the end.  ValueError when the file has no block (each marker on a line of its own, once)."""
    lines = text.split("\n")
    if lines.count(BEGIN) != 1 or lines.count(END) != 1 or lines.index(BEGIN) > lines.index(END):
        raise ValueError(f"no block between the lines {BEGIN} and {END}")
    begin, end = lines.index(BEGIN), lines.index(END)
    old_rows = [line for line in lines[begin + 1:end] if line.startswith("|")][2:]  # past the header lines
    new = {f.fault_class: f.row() for f in figures}
    rows = [new.pop(_row_key(line), line) for line in old_rows]
    rows += new.values()
    block = [BEGIN, note, "", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS), *rows, END]
    return "\n".join(lines[:begin] + block + lines[end + 1:])


def write_figures(path: Path, figures: Sequence[Figures], note: str) -> None:
    """Rewrite ``path``'s generated block (``rewrite_block``): a new file renamed over the old one."""
    text = rewrite_block(path.read_text(), figures, note)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        partial.write_text(text)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)


def figures_path(root: Path) -> Path | None:
    """The markdown file ``FAULTS_FIGURES`` names (relative: to the repository ``root``); None when unset
    or empty, as in the default run: only scripts/faults.sh's long run writes RELIABILITY.md."""
    value = os.environ.get(FIGURES_ENV, "").strip()
    if not value:
        return None
    path = Path(value)
    return path if path.is_absolute() else root / path
