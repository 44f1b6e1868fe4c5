"""A file system that behaves like a disk after a power cut, for the power-cut tests (issue 23).

It is a FUSE file system (mfusepy, over Debian's fuse3) that keeps its files in memory and
remembers what was made durable: per file, what was written since its last fsync/fdatasync
(an undo record of the bytes it overwrote or cut, and its length then); per directory, its
entries as of its last fsync.  A *power cut* forgets all the rest: every directory goes back to
its last synced entries (a file created, renamed or removed since is not, is back, or keeps its
old name), every file still named goes back to its last synced content and length, and what no
synced entry names is gone.  The mount is then taken down and mounted again, as a reboot drops
the page cache, so nothing the kernel cached of the lost writes is read after the cut.

This models what the relay may assume of a disk (POSIX: data is durable after fsync of the
file, a name after fsync of its directory) and nothing more, like LazyFS (Jepsen) or the
crash tests of SQLite: the most pessimistic disk that keeps those promises.

A cut can be aimed at a rare moment: *armed* with an operation and a part of a path (and which
occurrence), the file system stops answering right after that operation until the cut, so the
test kills the writer there: between the rename of a state file and the fsync of its directory,
right after a new binlog file is created, in the middle of the writes of a large transaction.

It runs as its own process, ``python3 -m tests.support.powercut MOUNTPOINT CONTROL_SOCKET``,
driven over a Unix socket by ``PowerCutMount`` (arm, wait for the trip, cut, counts, stop).  The tests need /dev/fuse,
fusermount3 (Debian's fuse3) and mfusepy (the test extra); scripts/test.sh installs them.
"""

from __future__ import annotations

import errno
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FUSERMOUNT = "fusermount3"
_NOW_NS = time.time_ns()


@dataclass(eq=False)
class Node:
    """A file or a directory.  A file's bytes live in ``data``; ``synced_length`` and ``undo``
    say what they were at its last fsync: replaying ``undo`` backwards and cutting or padding
    to ``synced_length`` gives them back."""

    directory: bool
    mode: int
    data: bytearray = field(default_factory=bytearray)
    synced_length: int = 0
    undo: list[tuple[int, bytes]] = field(default_factory=list)  # (offset, bytes there before), oldest first
    entries: dict[str, Node] = field(default_factory=dict)
    synced_entries: dict[str, Node] = field(default_factory=dict)
    mtime_ns: int = _NOW_NS

    def overwritten(self, offset: int, length: int) -> None:
        """Remember what [offset, offset + length) held of the synced content before it changes."""
        end = min(offset + length, self.synced_length)
        if offset < end:
            self.undo.append((offset, bytes(self.data[offset:end])))

    def synced(self) -> None:
        self.synced_length = len(self.data)
        self.undo.clear()

    def lose_unsynced(self) -> None:
        for offset, before in reversed(self.undo):
            if len(self.data) < offset + len(before):
                self.data.extend(bytes(offset + len(before) - len(self.data)))
            self.data[offset : offset + len(before)] = before
        del self.data[self.synced_length :]
        self.data.extend(bytes(self.synced_length - len(self.data)))
        self.undo.clear()


class PowerCutFS:
    """The FUSE operations (mfusepy calls them by name, one thread per request)."""

    use_ns = True

    def __init__(self) -> None:
        self.mutex = threading.RLock()
        self.root = Node(True, stat.S_IFDIR | 0o755)
        self.handles: dict[int, Node] = {}
        self.next_handle = 1
        self.counts = {"fsync": 0, "fsyncdir": 0, "cuts": 0, "lost_bytes": 0, "lost_entries": 0}
        self.armed: tuple[str, str, int] | None = None  # operation, part of the path, occurrences left
        self.tripped: str | None = None  # the operation and path that tripped it
        self.thawed = threading.Event()
        self.thawed.set()

    # ------------------------------------------------------------------ aiming a cut

    def arm(self, operation: str, path_part: str, occurrence: int) -> None:
        with self.mutex:
            self.armed = (operation, path_part, occurrence)
            self.tripped = None

    def _after(self, operation: str, path: str) -> None:
        """Called after each changing operation, outside the lock: freeze when it is the one armed."""
        with self.mutex:
            armed = self.armed
            if armed is None or armed[0] != operation or armed[1] not in path:
                return
            if armed[2] > 1:
                self.armed = (armed[0], armed[1], armed[2] - 1)
                return
            self.armed = None
            self.tripped = f"{operation} {path}"
            self.thawed.clear()
        self.thawed.wait()  # until the cut: the writer is killed meanwhile

    # ------------------------------------------------------------------ the power cut

    def power_cut(self) -> None:
        """Forget everything not synced (see the module docstring)."""
        with self.mutex:
            kept: set[int] = set()
            self._restore(self.root, kept)
            self.handles.clear()
            self.counts["cuts"] += 1
            self.armed = None

    def _restore(self, directory: Node, kept: set[int]) -> None:
        lost = set(directory.entries.items()) ^ set(directory.synced_entries.items())
        self.counts["lost_entries"] += len(lost)
        directory.entries = dict(directory.synced_entries)
        for node in directory.entries.values():
            if id(node) in kept:
                continue
            kept.add(id(node))
            if node.directory:
                self._restore(node, kept)
            else:
                before = len(node.data)
                node.lose_unsynced()
                self.counts["lost_bytes"] += max(0, before - len(node.data))

    # ------------------------------------------------------------------ names

    def _node(self, path: str) -> Node:
        node = self.root
        for part in filter(None, path.split("/")):
            if not node.directory or part not in node.entries:
                raise OSError(errno.ENOENT, path)
            node = node.entries[part]
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._node(head or "/")
        if not parent.directory:
            raise OSError(errno.ENOTDIR, path)
        return parent, name

    def _handle(self, node: Node) -> int:
        handle = self.next_handle
        self.next_handle += 1
        self.handles[handle] = node
        return handle

    # ------------------------------------------------------------------ FUSE operations

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        with self.mutex:
            node = self.handles.get(fh) if fh else None
            node = node or self._node(path)
            size = 4096 if node.directory else len(node.data)
            return {"st_mode": node.mode, "st_nlink": 2 if node.directory else 1, "st_size": size,
                    "st_blocks": (size + 511) // 512, "st_uid": os.getuid(), "st_gid": os.getgid(),
                    "st_atime": node.mtime_ns, "st_mtime": node.mtime_ns, "st_ctime": node.mtime_ns}

    def readdir(self, path: str, fh: int) -> list[str]:
        with self.mutex:
            return [".", "..", *self._node(path).entries]

    def opendir(self, path: str) -> int:
        with self.mutex:
            return self._handle(self._node(path))

    def releasedir(self, path: str, fh: int) -> int:
        with self.mutex:
            self.handles.pop(fh, None)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self.mutex:
            parent, name = self._parent(path)
            if name in parent.entries:
                raise OSError(errno.EEXIST, path)
            parent.entries[name] = Node(True, stat.S_IFDIR | (mode & 0o7777))
        self._after("mkdir", path)
        return 0

    def rmdir(self, path: str) -> int:
        with self.mutex:
            parent, name = self._parent(path)
            node = self._node(path)
            if not node.directory:
                raise OSError(errno.ENOTDIR, path)
            if node.entries:
                raise OSError(errno.ENOTEMPTY, path)
            del parent.entries[name]
        return 0

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        with self.mutex:
            parent, name = self._parent(path)
            node = parent.entries.get(name)
            if node is None:
                node = parent.entries[name] = Node(False, stat.S_IFREG | (mode & 0o7777))
            handle = self._handle(node)
        self._after("create", path)
        return handle

    def open(self, path: str, flags: int) -> int:
        with self.mutex:
            node = self._node(path)
            if flags & os.O_TRUNC and not node.directory:
                self.truncate(path, 0)
            return self._handle(node)

    def release(self, path: str, fh: int) -> int:
        with self.mutex:
            self.handles.pop(fh, None)
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self.mutex:
            node = self.handles.get(fh) or self._node(path)
            return bytes(node.data[offset : offset + size])

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self.mutex:
            node = self.handles.get(fh) or self._node(path)
            node.overwritten(offset, len(data))
            if len(node.data) < offset:
                node.data.extend(bytes(offset - len(node.data)))
            node.data[offset : offset + len(data)] = data
            node.mtime_ns = time.time_ns()
        self._after("write", path)
        return len(data)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self.mutex:
            node = (self.handles.get(fh) if fh else None) or self._node(path)
            if length < len(node.data):
                node.overwritten(length, len(node.data) - length)
                del node.data[length:]
            else:
                node.data.extend(bytes(length - len(node.data)))
            node.mtime_ns = time.time_ns()
        self._after("truncate", path)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self.mutex:
            (self.handles.get(fh) or self._node(path)).synced()
            self.counts["fsync"] += 1
        self._after("fsync", path)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self.mutex:
            node = self.handles.get(fh) or self._node(path)
            node.synced_entries = dict(node.entries)
            self.counts["fsyncdir"] += 1
        self._after("fsyncdir", path)
        return 0

    def rename(self, old: str, new: str) -> int:
        with self.mutex:
            source, old_name = self._parent(old)
            target, new_name = self._parent(new)
            if old_name not in source.entries:
                raise OSError(errno.ENOENT, old)
            target.entries[new_name] = source.entries.pop(old_name)
        self._after("rename", new)
        return 0

    def unlink(self, path: str) -> int:
        with self.mutex:
            parent, name = self._parent(path)
            if name not in parent.entries:
                raise OSError(errno.ENOENT, path)
            del parent.entries[name]
        self._after("unlink", path)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        with self.mutex:
            node = self._node(path)
            node.mode = (node.mode & ~0o7777) | (mode & 0o7777)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        with self.mutex:
            self._node(path).mtime_ns = times[1] if times else time.time_ns()
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 24, "f_bfree": 1 << 23,
                "f_bavail": 1 << 23, "f_files": 1 << 20, "f_ffree": 1 << 19, "f_namemax": 255}


# ---------------------------------------------------------------------- the daemon


def serve(mountpoint: str, control: str) -> None:
    """Mount, answer the control socket, mount again after each cut, until told to stop."""
    import mfusepy

    fs = PowerCutFS()
    stop = threading.Event()
    mount_now = threading.Event()
    loop_ended = threading.Event()

    def run_mounts() -> None:
        while mount_now.wait() and not stop.is_set():
            mount_now.clear()
            loop_ended.clear()
            # single-threaded: FUSE requests one at a time, in the order the kernel sends them
            try:
                mfusepy.FUSE(fs, mountpoint, foreground=True, nothreads=True, fsname="powercut", auto_unmount=True)
            except RuntimeError:  # the loop of an aborted connection ends with an error
                pass
            loop_ended.set()

    thread = threading.Thread(target=run_mounts, daemon=True)
    thread.start()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(control)
    listener.listen(1)
    mount_now.set()
    _wait_mounted(mountpoint)
    connection = _connection_of(mountpoint)
    while not stop.is_set():
        conn, _ = listener.accept()
        with conn:
            command, *words = conn.recv(1024).decode().split()
            if command == "arm":  # arm OPERATION PATH_PART OCCURRENCE
                fs.arm(words[0], words[1], int(words[2]))
                conn.sendall(b"ok\n")
            elif command == "tripped":
                with fs.mutex:
                    conn.sendall(f"{fs.tripped or '-'}\n".encode())
            elif command == "cut":
                fs.power_cut()
                # A process waits for a FUSE request the daemon holds even through SIGKILL: the
                # connection is aborted, so every request fails and the killed writers die.
                _abort(connection)
                fs.thawed.set()
                loop_ended.wait(30)
                _unmount(mountpoint)
                mount_now.set()  # a new mount: nothing of the old page cache is read again
                _wait_mounted(mountpoint)
                connection = _connection_of(mountpoint)
                conn.sendall(b"ok\n")
            elif command == "counts":
                with fs.mutex:
                    conn.sendall((repr(fs.counts) + "\n").encode())
            elif command == "stop":
                stop.set()
                _unmount(mountpoint)
                mount_now.set()
                conn.sendall(b"ok\n")
    thread.join(10)


FUSECTL = Path("/sys/fs/fuse/connections")


def _connection_of(mountpoint: str) -> int:
    """The fusectl number of the mount (its device's minor number): read while it answers."""
    return os.minor(os.stat(mountpoint).st_dev)


def _abort(connection: int) -> None:
    (FUSECTL / str(connection) / "abort").write_text("1")


def mount_fusectl() -> None:
    """fusectl, where a FUSE connection is aborted (Debian mounts it at boot; containers may not)."""
    if not any(line.split()[2] == "fusectl" for line in Path("/proc/self/mounts").read_text().splitlines()):
        subprocess.run(["mount", "-t", "fusectl", "fusectl", str(FUSECTL)], check=True, capture_output=True,
                       timeout=30)


def _unmount(mountpoint: str) -> None:
    """Lazily (an aborted mount may already be gone: auto_unmount), and until it is gone."""
    deadline = time.monotonic() + 30
    while _is_fuse_mount(mountpoint):
        subprocess.run([FUSERMOUNT, "-u", "-z", mountpoint], capture_output=True, timeout=30)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{mountpoint} is still mounted")


def _wait_mounted(mountpoint: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not _is_fuse_mount(mountpoint):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{mountpoint} was not mounted within {timeout}s")
        time.sleep(0.01)  # polling the mount table: mfusepy says nothing when the mount is up


def _is_fuse_mount(mountpoint: str) -> bool:
    target = os.path.realpath(mountpoint)
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == target and line.split()[2].startswith("fuse") for line in mounts)


# ---------------------------------------------------------------------- the tests' side


class PowerCutMount:
    """A power-cut file system mounted at ``mountpoint`` by a daemon process of its own."""

    def __init__(self, mountpoint: Path, work: Path) -> None:
        self.mountpoint = Path(mountpoint)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.control = str(Path(work) / "powercut.sock")
        self.log = Path(work) / "powercut.log"
        mount_fusectl()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.powercut", str(self.mountpoint), self.control],
                stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2])
        deadline = time.monotonic() + 30
        while not (os.path.exists(self.control) and _is_fuse_mount(str(self.mountpoint))):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the power-cut file system did not mount: {self.log.read_text()[-2000:]}")
            time.sleep(0.01)

    def _ask(self, command: str) -> str:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(60)
            conn.connect(self.control)
            conn.sendall(command.encode())
            return conn.recv(4096).decode().strip()

    def cut(self) -> None:
        """A power cut: every writer must be dead first (a killed machine runs nothing)."""
        if self._ask("cut") != "ok":
            raise RuntimeError("the power-cut file system did not cut")

    def arm(self, operation: str, path_part: str, occurrence: int = 1) -> None:
        """Freeze right after the ``occurrence``-th ``operation`` (create, write, truncate, fsync,
        fsyncdir, rename, unlink, mkdir) on a path containing ``path_part``, until the cut."""
        if self._ask(f"arm {operation} {path_part} {occurrence}") != "ok":
            raise RuntimeError("the power-cut file system was not armed")

    def tripped(self) -> str | None:
        """The operation and path it froze at, or None while it has not."""
        answer = self._ask("tripped")
        return None if answer == "-" else answer

    def counts(self) -> dict[str, int]:
        import ast

        return dict(ast.literal_eval(self._ask("counts")))

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self._ask("stop")
            except OSError:
                pass
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if _is_fuse_mount(str(self.mountpoint)):
            _unmount(str(self.mountpoint))

    def __enter__(self) -> PowerCutMount:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
