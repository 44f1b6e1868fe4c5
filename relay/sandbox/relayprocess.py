"""The relay as the tests and the benchmarks run it: the real ``binlog-relay run`` in a child process.

    relay = start_relay(work_dir, primary.port)     # work_dir/relay.yaml, relay.log, data/; listening
    ... 127.0.0.1:relay.port as repl/replpass; relay.metrics_port ...
    assert relay.stop() == 0                        # SIGTERM: a clean stop exits 0

The child runs the relay package this module belongs to (its folder goes first on PYTHONPATH), so a
checkout is tested as it is, installed or not.  Nothing here imports the relay's own runtime.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .compare import indexed_files
from .errors import SandboxError, WaitTimeout, file_tail
from .mariadb import REPL_PASSWORD, REPL_USER
from .polling import wait_for
from .ports import LOOPBACK, free_port, port_in_use
from .procfs import status_kib

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds relay/
RELAY_SERVER_ID = 1001
START_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0
KILL_TIMEOUT = 10.0
LISTENING = "listening for replicas"  # what the relay logs (at INFO) once replicas may connect
METRICS_LINE = re.compile(r"metrics on http://[^:]+:(\d+)/metrics")
LOGS_INFO = ("DEBUG", "INFO")


class RelayProcessError(SandboxError):
    """The relay child exited, or did not start or stop in time; the message has its log's tail."""


def relay_config(data_dir: Path, upstream_port: int, **overrides: Any) -> dict[str, Any]:
    """A relay configuration for loopback: the upstream as repl/replpass, a free listen port, the same
    user for replicas, metrics on an ephemeral port, sync commit, INFO logs, and a fast heartbeat and
    reconnect so that a restarted upstream is found again within a second.  A mapping in overrides is
    merged into the section of that name; any other value replaces it."""
    config: dict[str, Any] = {
        "server_id": RELAY_SERVER_ID,
        "data_dir": str(data_dir),
        "upstream": {"host": LOOPBACK, "port": upstream_port, "user": REPL_USER, "password": REPL_PASSWORD,
                     "heartbeat_period": 1.0, "reconnect": {"initial_delay": 0.1, "max_delay": 1.0}},
        "listen": {"host": LOOPBACK, "port": free_port()},
        "users": [{"name": REPL_USER, "password": REPL_PASSWORD}],
        "metrics": {"host": LOOPBACK, "port": 0},
        "storage": {"sync": "commit"},
        "logging": {"level": "INFO"},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body) of GET http://127.0.0.1:port/path; 4xx/5xx are returned, not raised."""
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}{path}", timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


class RelayProcess:
    """One relay child in work_dir: relay.yaml (the config, written at each start), relay.log (every
    run's output, appended) and the data_dir the config names.  start() does not wait (a test may
    expect the relay to refuse to start); wait_listening() does."""

    def __init__(self, work_dir: Path, config: dict[str, Any], env: dict[str, str] | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.config = config
        self.env = dict(env or {})  # added to the child's environment (a test's skewed clock, say)
        self.data_dir = Path(config["data_dir"])
        self.config_path = self.work_dir / "relay.yaml"
        self.log_path = self.work_dir / "relay.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0  # where this run's lines begin in log_path (a restart appends)

    # --- where it is

    @property
    def port(self) -> int:
        """Where replicas connect to this relay."""
        return int(self.config["listen"]["port"])

    @property
    def metrics_port(self) -> int:
        """The port of the relay's HTTP endpoint: the configured one, or (port 0) the one it logged."""
        port = int(self.config.get("metrics", {}).get("port", 0))
        if port:
            return port
        found = METRICS_LINE.findall(self.log_text())
        if not found:
            raise RelayProcessError(f"the relay logged no metrics endpoint\n{self.log_tail()}")
        return int(found[-1])

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RelayProcessError("the relay was never started")
        return self.proc.pid

    # --- running

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        # JSON is YAML, and needs nothing beyond the standard library here.
        self.config_path.write_text(json.dumps(self.config, indent=2) + "\n")
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONUNBUFFERED": "1",
               "PYTHONPATH": f"{PACKAGE_ROOT}{os.pathsep + path if path else ''}", **self.env}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "relay.cli", "run", "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)

    def wait_listening(self, timeout: float = START_TIMEOUT) -> None:
        """Until this run (not an earlier one in the same log) accepts replicas and, when its metrics
        port is fixed, answers /healthz.  RelayProcessError at once if it exits meanwhile."""
        try:
            wait_for(lambda: self._alive_and(self._listening), timeout,
                     f"the relay did not start listening on port {self.port}")
            metrics = self.config.get("metrics", {})
            if metrics.get("enabled", True) and metrics.get("port"):
                wait_for(lambda: self._alive_and(self._answers_healthz), timeout,
                         f"no metrics endpoint on port {self.metrics_port}", ignore=(OSError,))
        except WaitTimeout as late:
            raise RelayProcessError(f"{late}\n{self.log_tail()}") from None

    def _alive_and(self, check: Callable[[], bool]) -> bool:
        """check(), once check_alive() found the relay running."""
        self.check_alive()
        return check()

    def _listening(self) -> bool:
        level = str(self.config.get("logging", {}).get("level", "INFO")).upper()
        if level in LOGS_INFO:
            # The log line rather than a probe: a probe is a connection the relay would count and log.
            return LISTENING in self.log_text()[self._log_start:]
        return port_in_use(self.port)

    def _answers_healthz(self) -> bool:
        return http_get(self.metrics_port, "/healthz")[0] == 200

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        """RelayProcessError with the exit status and the log's tail if the relay is not running."""
        if not self.alive():
            status = self.proc.returncode if self.proc is not None else "never started"
            raise RelayProcessError(f"the relay exited (status {status})\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and the exit status.  A relay that does not stop within timeout is killed, and
        RelayProcessError says so (SIGTERM must stop it within seconds)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill9()
                raise RelayProcessError(f"the relay did not stop within {timeout:g} s of SIGTERM; killed it\n"
                                        f"{self.log_tail()}") from None
        return self.proc.returncode

    def kill9(self) -> None:
        """SIGKILL, as a crash would."""
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(KILL_TIMEOUT)

    def close(self) -> int | None:
        """stop(), or kill it if that fails; never raises (for teardown and finally blocks).  The exit
        status, None if it never ran."""
        if self.proc is None:
            return None
        try:
            return self.stop()
        except (RelayProcessError, OSError):
            self.kill9()
            return self.proc.returncode

    # --- what it did

    def log_text(self) -> str:
        """Every run's output."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 80) -> str:
        """The last lines of this run's output, for error messages."""
        return f"relay log {self.log_path} (tail):\n{file_tail(self.log_path, self._log_start, lines)}"

    def peak_rss_bytes(self) -> int:
        """The relay's peak resident set so far (VmHWM)."""
        return self._memory_bytes("VmHWM")

    def rss_bytes(self) -> int:
        """The relay's resident set now (VmRSS)."""
        return self._memory_bytes("VmRSS")

    def _memory_bytes(self, field: str) -> int:
        kib = status_kib(self.pid, field)
        if not kib:
            # 0 would pass every memory bound: a relay that is gone must fail the check instead.
            raise RelayProcessError(f"no {field} for the relay (pid {self.pid}): has it exited?")
        return kib * 1024

    def stored_files(self) -> list[str]:
        """The files the relay's binlog.index lists, in order."""
        return indexed_files(self.data_dir) or []


def start_relay(work_dir: Path, upstream_port: int, *, metrics_port: int | None = None,
                data_dir: Path | str | None = None, env: dict[str, str] | None = None,
                **overrides: Any) -> RelayProcess:
    """A relay child in work_dir (relay.yaml, relay.log, and data/ unless data_dir is given) replicating
    from 127.0.0.1:upstream_port, listening for replicas when returned; with metrics_port, its HTTP
    endpoint is on that port and answering; ``env`` added to its environment.  overrides as
    relay_config takes them."""
    if metrics_port is not None:
        overrides["metrics"] = {**overrides.get("metrics", {}), "host": LOOPBACK, "port": metrics_port}
    data = Path(data_dir) if data_dir is not None else Path(work_dir) / "data"
    relay = RelayProcess(work_dir, relay_config(data, upstream_port, **overrides), env)
    relay.start()
    try:
        relay.wait_listening()
    except BaseException:
        relay.close()  # a relay that never listened is not left running
        raise
    return relay
