"""The layers of docs/architecture.md hold in the code: every import of a relay module goes to a
module of its own layer or of a layer below it.  The table in the document is read by this test, so
the document and the code cannot drift apart; a module the table does not place is a failure too."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELAY = ROOT / "relay"
DOC = ROOT / "docs" / "architecture.md"


def _layers() -> list[tuple[str, list[str]]]:
    """(layer, module paths or package folders) from the table, top layer first."""
    rows, in_table = [], False
    for line in DOC.read_text().splitlines():
        if line.startswith("| layer | modules |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table and not line.startswith("| ---"):
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            rows.append((cells[0], re.findall(r"`(relay/[\w/.]*)`", cells[1])))
    assert len(rows) >= 5, f"no layer table found in {DOC}"
    return rows


def _rank_of(module: str, rows: list[tuple[str, list[str]]]) -> tuple[int, str] | None:
    """(rank, layer) of a module path like relay/binlog/events.py; the most specific entry wins."""
    best: tuple[int, int, str] | None = None  # (specificity, rank, layer)
    for index, (layer, entries) in enumerate(rows):
        for entry in entries:
            if module == entry or (entry.endswith("/") and module.startswith(entry)):
                candidate = (len(entry), len(rows) - index, layer)
                best = max(best, candidate) if best else candidate
    return (best[1], best[2]) if best else None


def _module_path(dotted: str) -> str | None:
    path = Path(*dotted.split("."))
    if (ROOT / path).with_suffix(".py").is_file():
        return f"{path}.py"
    if (ROOT / path / "__init__.py").is_file():
        return f"{path}/__init__.py"
    return None


def _imports(source: Path) -> list[str]:
    """Relay module paths imported anywhere in ``source`` (lazy imports inside functions too)."""
    package = ".".join(source.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            if name.startswith("relay") and (path := _module_path(name)) is not None:
                found.append(path)
    return found


def _modules() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in RELAY.rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def test_every_module_has_a_layer():
    rows = _layers()
    unplaced = [module for module in _modules() if _rank_of(module, rows) is None]
    assert not unplaced, f"modules not in the layer table of {DOC.name}: {unplaced}"


def test_imports_go_down_or_sideways():
    rows = _layers()
    upward = []
    for module in _modules():
        placed = _rank_of(module, rows)
        if placed is None:
            continue  # test_every_module_has_a_layer names it
        for imported in _imports(ROOT / module):
            target = _rank_of(imported, rows)
            if imported.endswith("__init__.py") or target is None:
                continue
            if target[0] > placed[0]:
                upward.append(f"{module} ({placed[1]}) imports {imported} ({target[1]})")
    assert not upward, "imports that run up the layers:\n" + "\n".join(upward)


def test_the_check_sees_an_upward_import():
    """The rule itself: the lowest layer importing the highest would be found."""
    rows = _layers()
    top, bottom = rows[0][1][0], rows[-1][1][0]
    assert _rank_of(top, rows)[0] > _rank_of(bottom, rows)[0]


def test_only_the_demo_command_reaches_the_sandbox():
    """relay/sandbox/ (the demo, throw-away servers, relay children, copy comparison) is for the demo
    command, the tests and the benchmarks: no product module depends on it, and the cli imports it
    inside its demo command only, so that no other command loads it."""
    sandbox = "relay/sandbox/"
    importers = [module for module in _modules() if not module.startswith(sandbox)
                 and any(path.startswith(sandbox) for path in _imports(ROOT / module))]
    assert importers == ["relay/cli.py"], importers
    top_level = ast.parse((ROOT / "relay" / "cli.py").read_text()).body
    eager = [node for node in top_level if isinstance(node, (ast.Import, ast.ImportFrom))
             and "sandbox" in ast.unparse(node)]
    assert not eager, [ast.unparse(node) for node in eager]
