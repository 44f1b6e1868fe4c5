"""The fault suite's generated block of RELIABILITY.md (tests/support/faultfigures.py): a run replaces the
rows of its classes, keeps the others and everything outside the markers, adds new classes at the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.faultfigures import BEGIN, END, FigureRecorder, Figures, rewrite_block, write_figures

REPO = Path(__file__).resolve().parents[2]


def _figures(fault_class: str, injected: str) -> Figures:
    return Figures(fault_class=fault_class, fault="a fault | with a bar", test="test_x.py::test_x", run="long",
                   injected=injected, recovery="fast", memory="1 MiB", data_lost="0", diverged="0")


def _rows(text: str) -> list[str]:
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    return [line for line in block.splitlines() if line.startswith("|")][2:]


def test_the_committed_file_has_one_row_per_class_and_a_run_keeps_what_did_not_run():
    text = (REPO / "RELIABILITY.md").read_text()
    before = _rows(text)
    assert len(before) >= 10 and all(row.count(" | ") == 8 for row in before)
    after = rewrite_block(text, [_figures("kill9", "3 kills"), _figures("new class", "1")], "_note_")
    rows = _rows(after)
    assert len(rows) == len(before) + 1
    assert rows[0].startswith("| kill9 | a fault \\| with a bar | `test_x.py::test_x` | long | 3 kills |")
    assert rows[1:-1] == before[1:]
    assert rows[-1].startswith("| new class |")
    assert after.split(BEGIN)[0] == text.split(BEGIN)[0] and after.split(END)[1] == text.split(END)[1]
    assert "\n_note_\n" in after
    # the same run again: the same file
    assert rewrite_block(after, [_figures("kill9", "3 kills"), _figures("new class", "1")], "_note_") == after


def test_a_file_without_the_markers_is_left_alone(tmp_path):
    path = tmp_path / "R.md"
    path.write_text("# no block\n")
    with pytest.raises(ValueError, match="fault-figures"):
        write_figures(path, [_figures("kill9", "1")], "note")
    assert path.read_text() == "# no block\n"
    path.write_text(f"a\n{BEGIN}\nold\n{END}\nb\n")
    write_figures(path, [_figures("kill9", "1")], "note")
    assert path.read_text().startswith(f"a\n{BEGIN}\nnote\n\n| Class |") and path.read_text().endswith(f"{END}\nb\n")
    assert [p.name for p in tmp_path.iterdir()] == ["R.md"]


def test_the_recorder_prints_the_faults_line_and_keeps_the_figures(capsys):
    pending: list[Figures] = []
    record = FigureRecorder("test_k.py::test_k", "default", pending)
    record("kill9", fault="kill -9", injected="2 kills", recovery="0.1 s", data_lost="0", diverged="0")
    assert capsys.readouterr().out == ("\nFAULTS kill9: injected 2 kills; data lost 0; replicas diverged 0; "
                                       "recovery: 0.1 s; memory: -\n")
    assert [(f.fault_class, f.test, f.run) for f in pending] == [("kill9", "test_k.py::test_k", "default")]
