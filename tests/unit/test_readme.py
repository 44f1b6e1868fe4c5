"""The README's configuration reference is the schema's, and its commands exist."""

from pathlib import Path

from relay.config_reference import reference_table

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_reference_is_current():
    assert reference_table() in (ROOT / "README.md").read_text(), \
        "regenerate the README table with: python3 -m relay.config_reference"


def test_two_commands_exist_and_ci_runs_the_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/demo.sh" in readme and "bash scripts/test.sh" in readme
    assert (ROOT / "scripts" / "demo.sh").exists()
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
