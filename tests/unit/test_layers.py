"""The layers of docs/architecture.md hold in the code: every import of a relay module goes to a
module of its own layer or of a layer below it.  The table in the document is read by this test, so
the document and the code cannot drift apart; a module the table does not place is a failure too.
Two more rules hold inside the layers: no imports run in a loop (imports for type checking count:
a loop for types alone still ties the modules together), and the sans-IO layers (decision 6) do
no I/O: no trio, no files, no sockets, in their Python or their C."""

from __future__ import annotations

import ast
import re
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELAY = ROOT / "relay"
DOC = ROOT / "docs" / "architecture.md"

# Decision 6: the layers that are pure code over bytes.  The table must call exactly these
# "sans-IO", so that a package cannot leave them (or join them) by an edit of the document alone.
SANS_IO = {"relay/protocol/", "relay/binlog/", "relay/gtid/", "relay/replication/", "relay/rows/",
           "relay/archive/objectformat.py"}


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
    """The file of a relay module: its .py, its package's __init__.py, or the C source of a
    compiled module (relay.binlog._scan is relay/binlog/_scan.c: it belongs to its layer too)."""
    path = Path(*dotted.split("."))
    if (ROOT / path).with_suffix(".py").is_file():
        return f"{path}.py"
    if (ROOT / path / "__init__.py").is_file():
        return f"{path}/__init__.py"
    if (ROOT / path).with_suffix(".c").is_file():
        return f"{path}.c"
    return None


def _import_lines(source: Path, text: str | None = None) -> list[tuple[str, str]]:
    """(relay module path, "line N: the import") for each relay module ``source`` imports, anywhere:
    lazy imports inside functions and imports under ``if TYPE_CHECKING:`` included.  ``from
    package import name`` imports the submodule when ``name`` is one, else the package itself."""
    package = ".".join(source.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(ast.parse(source.read_text() if text is None else text)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names = [f"{base}.{alias.name}" if _module_path(f"{base}.{alias.name}") else base
                     for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith("relay") and (path := _module_path(name)) is not None:
                found.append((path, f"line {node.lineno}: {ast.unparse(node)}"))
    return found


def _imports(source: Path) -> list[str]:
    """Relay module paths imported anywhere in ``source`` (lazy imports inside functions too)."""
    return [path for path, _ in _import_lines(source)]


def _modules() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in RELAY.rglob("*.py")
                  if p.name != "__init__.py" and "__pycache__" not in p.parts)


def _sources(under: Path = RELAY, suffixes: tuple[str, ...] = (".py",)) -> list[str]:
    """Every source file under ``under`` (or ``under`` itself, a file), packages' __init__.py included."""
    paths = [under] if under.is_file() else under.rglob("*")
    return sorted(str(p.relative_to(ROOT)) for p in paths if p.suffix in suffixes and "__pycache__" not in p.parts)


def test_every_module_has_a_layer():
    rows = _layers()
    unplaced = [module for module in _modules() if _rank_of(module, rows) is None]
    assert not unplaced, f"modules not in the layer table of {DOC.name}: {unplaced}"


def test_imports_go_down_or_sideways():
    rows = _layers()
    upward = []
    for module in _sources():
        placed = _rank_of(module, rows)
        if placed is None:
            continue  # relay/__init__.py; test_every_module_has_a_layer names any other
        for imported, statement in _import_lines(ROOT / module):
            target = _rank_of(imported, rows)
            if target is not None and target[0] > placed[0]:
                upward.append(f"{module} ({placed[1]}) imports {imported} ({target[1]}), {statement}")
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


# --------------------------------------------------------------------------- import loops


Graph = dict[str, dict[str, str]]  # module -> {imported module: the import statement}


def _graph() -> Graph:
    """Every relay module's imports of relay modules, with the statement that makes each."""
    graph: Graph = {}
    for module in _sources():
        edges = graph.setdefault(module, {})
        for imported, statement in _import_lines(ROOT / module):
            edges.setdefault(imported, statement)
    return graph


def _loops(graph: Graph) -> list[list[str]]:
    """One cycle (first module repeated at its end) through each set of modules that import each
    other, directly or through others (Tarjan's strongly connected components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.get(module, {}):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1 or module in graph.get(module, {}):
                components.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_cycle_through(sorted(component)[0], component, graph) for component in components]


def _cycle_through(start: str, component: set[str], graph: Graph) -> list[str]:
    """The shortest way from ``start`` back to itself inside ``component``."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        module = queue.popleft()
        for imported in sorted(graph.get(module, {})):
            if imported == start:
                path = [module]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return [start, *reversed(path[:-1]), start] if module != start else [start, start]
            if imported in component and imported not in came_from:
                came_from[imported] = module
                queue.append(imported)
    raise AssertionError(f"no cycle through {start}")  # a component always has one


def _describe(cycle: list[str], graph: Graph) -> str:
    rows = _layers()
    layers = sorted({placed[1] for module in cycle if (placed := _rank_of(module, rows))})
    steps = [f"  {module} imports {imported} ({graph[module][imported]})"
             for module, imported in zip(cycle, cycle[1:])]
    return f"a loop in {', '.join(layers) or 'no layer'}:\n" + "\n".join(steps)


def test_no_import_loops_inside_a_layer():
    """Modules of one layer may import each other, but not in a loop.  Imports under ``if
    TYPE_CHECKING:`` count: a loop for types alone still means neither module can be read, moved
    or tested without the other (the reason the table map is a module of its own)."""
    graph = _graph()
    loops = _loops(graph)
    assert not loops, "import loops:\n" + "\n".join(_describe(cycle, graph) for cycle in loops)


def test_the_check_sees_a_loop_for_types_only():
    """The loop the table map's own module cut: readers.py importing rows.py's names for its
    annotations only, while rows.py imports readers.py, is found and named."""
    graph = _graph()
    readers = ROOT / "relay" / "rows" / "coltypes" / "readers.py"
    with_types = readers.read_text() + "\nif TYPE_CHECKING:\n    from ..rows import RowsEvent\n"
    module = str(readers.relative_to(ROOT))
    graph[module] = {imported: statement for imported, statement in _import_lines(readers, with_types)}
    loops = _loops(graph)
    assert [set(cycle) for cycle in loops] == [{"relay/rows/rows.py", module}], loops
    assert "from ..rows import RowsEvent" in _describe(loops[0], graph)
    assert _loops({"a": {"b": ""}, "b": {"c": ""}, "c": {"a": ""}, "d": {"a": ""}}) == [["a", "b", "c", "a"]]
    assert _loops({"a": {"a": ""}, "b": {"a": ""}}) == [["a", "a"]]


# --------------------------------------------------------------------------- sans-IO

# Modules that only move bytes between processes, files or tasks.
_IO_MODULES = {"trio", "asyncio", "socket", "mmap", "select", "selectors", "subprocess"}
# os functions on files and file descriptors (os.pread* and os.pwrite* by prefix).
_OS_IO = {"open", "read", "write", "readv", "writev", "sendfile", "fdopen", "lseek", "fsync", "fdatasync",
          "ftruncate", "truncate", "close", "stat", "listdir", "scandir", "remove", "unlink", "rename",
          "replace", "mkdir", "makedirs", "rmdir"}
_PATH_IO = {"read_bytes", "read_text", "write_bytes", "write_text"}  # pathlib's whole-file calls


def _os_io(name: str) -> bool:
    return name in _OS_IO or name.startswith(("pread", "pwrite"))


def _python_io(text: str) -> list[str]:
    """What in this Python source imports an I/O module or reads or writes a file."""
    found = []
    aliases: dict[str, str] = {}  # local name -> "os" or "io"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                root = alias.name.split(".")[0]
                if root in _IO_MODULES:
                    found.append(f"line {node.lineno}: {ast.unparse(node)}")
                elif root in ("os", "io", "builtins"):
                    aliases[alias.asname or root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            root = node.module.split(".")[0]
            io_names = [alias.name for alias in node.names
                        if (root == "os" and _os_io(alias.name)) or (root in ("io", "builtins") and alias.name
                                                                     in ("open", "FileIO"))]
            if root in _IO_MODULES or io_names:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _PATH_IO:
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
            kind = aliases[node.value.id]
            if (kind == "os" and _os_io(node.attr)) or (kind != "os" and node.attr in ("open", "FileIO")):
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return sorted(set(found), key=lambda what: int(what.split()[1].rstrip(":")))


# C: headers of file and socket I/O, calls of the POSIX and stdio I/O functions (a member such
# as ctx->read( is not one), and the C API's file objects.
_C_IO_HEADERS = re.compile(r"#\s*include\s*<(unistd|fcntl|stdio|sys/mman|sys/socket|sys/uio|sys/stat)\.h>")
_C_IO_CALLS = re.compile(
    r"(?<![\w.>])(open|openat|creat|read|write|pread|pread64|pwrite|pwrite64|preadv|pwritev|readv|writev"
    r"|mmap|munmap|madvise|fopen|fdopen|fread|fwrite|fclose|socket|connect|accept|send|recv|sendfile"
    r"|lseek|fsync|fdatasync|close)\s*\(|\b(PyFile_\w+|PyObject_AsFileDescriptor)\b")
_C_COMMENTS_AND_STRINGS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def _c_io(text: str) -> list[str]:
    """What in this C source includes an I/O header or calls an I/O function (comments and
    string literals blanked first, line numbers kept)."""
    code = _C_COMMENTS_AND_STRINGS.sub(lambda match: re.sub(r"[^\n]", " ", match.group()), text)
    found = []
    for pattern in (_C_IO_HEADERS, _C_IO_CALLS):
        for match in pattern.finditer(code):
            found.append(f"line {code.count(chr(10), 0, match.start()) + 1}: {match.group().rstrip('(').strip()}")
    return found


def test_the_sans_io_layers_are_decision_6s():
    marked = {entry for layer, entries in _layers() if "sans-IO" in layer for entry in entries}
    assert marked == SANS_IO, f"the layers the table of {DOC.name} calls sans-IO: {sorted(marked)}"


def test_sans_io_layers_do_no_io():
    """Decision 6: the sans-IO layers take bytes and give bytes; the shells (trio) and storage do
    the waiting and the reading and writing.  No module of theirs imports trio (or another I/O
    module) or touches a file or a socket, in Python or in its C module."""
    offences = []
    for folder in sorted(SANS_IO):
        for module in _sources(ROOT / folder, (".py", ".c")):
            text = (ROOT / module).read_text()
            for what in (_python_io(text) if module.endswith(".py") else _c_io(text)):
                offences.append(f"{module}: {what}")
    assert not offences, "I/O in the sans-IO layers (decision 6):\n" + "\n".join(offences)


def test_the_check_sees_io():
    python = ("import os\nimport trio\nfrom socket import socket\nimport mmap as m\nfrom os import pread\n"
              "def f(path, fd):\n    data = open(path).read()\n    os.pwritev(fd, [data], 0)\n"
              "    os.urandom(20)\n    return path.read_bytes()\n")
    assert _python_io(python) == [
        "line 2: import trio", "line 3: from socket import socket", "line 4: import mmap as m",
        "line 5: from os import pread", "line 7: open(...)", "line 8: os.pwritev", "line 10: path.read_bytes(...)"]
    c = ('#include <string.h>\n#include <unistd.h>\n/* read(fd) in a comment */\n'
         'static int f(int fd, S *s) { char b[1]; s->read(b); puts("write(1)"); return read(fd, b, 1); }\n')
    assert _c_io(c) == ["line 2: #include <unistd.h>", "line 4: read"]
