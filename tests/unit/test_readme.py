"""The README's generated tables are current, and its two commands exist."""

from pathlib import Path

from relay.docgen import TABLES

ROOT = Path(__file__).resolve().parents[2]


def test_generated_tables_are_current():
    readme = (ROOT / "README.md").read_text()
    for marker, make_table in TABLES.items():
        assert marker + "\n" + make_table() + "\n" in readme, \
            "regenerate the README tables with: python3 -m relay.docgen README.md"


def test_two_commands_exist_and_ci_runs_the_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    assert (ROOT / "scripts" / "demo.sh").exists()
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
