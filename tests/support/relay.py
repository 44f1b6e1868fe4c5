"""The relay as the tests run it: the real `binlog-relay run` in a subprocess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from relay.storage.compare import copy_differences

from .mariadb import MariaDB, free_port, wait_for



def relay_config(data_dir: Path, upstream_port: int, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "server_id": 1001,
        "data_dir": str(data_dir),
        "upstream": {"host": "127.0.0.1", "port": upstream_port, "user": "repl", "password": "replpass",
                     "heartbeat_period": 1.0, "reconnect": {"initial_delay": 0.1, "max_delay": 1.0}},
        "listen": {"host": "127.0.0.1", "port": free_port()},
        "users": [{"name": "repl", "password": "replpass"}],
        "metrics": {"host": "127.0.0.1", "port": 0},
        "storage": {"sync": "commit"},
        "logging": {"level": "INFO"},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


class RelayProcess:
    def __init__(self, work_dir: Path, config: dict[str, Any]) -> None:
        self.work_dir = work_dir
        self.config = config
        self.data_dir = Path(config["data_dir"])
        self.config_path = work_dir / "relay.yaml"
        self.log_path = work_dir / "relay.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_start = 0  # where this run's lines begin in log_path (a restart appends)

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._log_start = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.config_path.write_text(yaml.safe_dump(self.config))
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "relay.cli", "run", "--config", str(self.config_path)],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        log.close()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def port(self) -> int:
        """Where replicas connect to this relay."""
        return int(self.config["listen"]["port"])

    def wait_listening(self, timeout: float = 30.0) -> None:
        """Until this run (not an earlier one in the same log) listens for replicas."""
        def listening() -> bool:
            return "listening for replicas" in self.log_text()[self._log_start:]
        wait_for(lambda: listening() or not self.alive(), timeout, "relay did not start listening")
        assert self.alive(), self.log_text()[-3000:]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int:
        if not self.alive():
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
        return self.proc.wait(timeout)  # type: ignore[union-attr]

    def kill9(self) -> None:
        if self.alive():
            self.proc.kill()  # type: ignore[union-attr]
            self.proc.wait(10)  # type: ignore[union-attr]

    def peak_rss_bytes(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc status")

    def stored_files(self) -> list[str]:
        index = self.data_dir / "binlog.index"
        if not index.exists():
            return []
        return [Path(line).name for line in index.read_text().splitlines() if line.strip()]


def mirror_differences(primary: MariaDB, data_dir: Path) -> list[str]:
    """What differs between the primary's binlogs and the relay's copies (empty = a mirror)."""
    primary_files = [name for name, _ in primary.binlog_files()]
    index = data_dir / "binlog.index"
    stored = [Path(line).name for line in index.read_text().splitlines() if line.strip()] if index.exists() else []
    problems = [] if stored == primary_files else [f"index {stored} != primary {primary_files}"]
    return problems + copy_differences([primary.binlog_path(name) for name in primary_files], data_dir)


def wait_for_mirror(primary: MariaDB, relay: RelayProcess, timeout: float = 60.0) -> None:
    last: list[str] = []

    def mirrored() -> bool:
        nonlocal last
        if not relay.alive():
            raise AssertionError(f"the relay exited ({relay.proc.returncode}):\n{relay.log_text()[-3000:]}")
        last = mirror_differences(primary, relay.data_dir)
        return not last

    try:
        wait_for(mirrored, timeout, "relay did not become a mirror of the primary")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {last}\nrelay log:\n{relay.log_text()[-3000:]}") from None



