"""binlog-relay command line: run | check-config | demo | hash-password | export | import | search | archive
| --version."""

from __future__ import annotations

import argparse
import getpass
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from . import __version__

if TYPE_CHECKING:
    from collections.abc import Callable

    from .archive.objectformat import Kek
    from .archive.store import StoreConfig
    from .config import Config

EXIT_CONFIG = 2


def _load(path: str) -> Config:
    # The configuration machinery (YAML, the option table) is imported by the commands that read
    # one: `search` and `import` start faster without it.
    from .config import ConfigError, load_config

    try:
        return load_config(path)
    except ConfigError as err:
        print(f"binlog-relay: invalid configuration {path}:", file=sys.stderr)
        for line in err.errors:
            print(f"  {line}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None


def cmd_run(args: argparse.Namespace) -> int:
    from .app import run_until_signalled
    from .errors import FatalError
    from .logs import setup_logging
    from .trio_run import run_trio

    config = _load(args.config)
    setup_logging(config.logging.level, config.logging.format)
    try:
        # Until trio takes over the signals, a SIGTERM simply ends the process cleanly.
        signal.signal(signal.SIGTERM, _exit_on_signal)
        run_trio(run_until_signalled, config)  # errors come out of their ExceptionGroups
    except FatalError as err:
        logging.getLogger("relay").error("%s", err)
        return 1
    except OSError as err:  # e.g. the listen or metrics port is taken, data_dir not writable
        logging.getLogger("relay").error("cannot start: %s", err)
        return 1
    return 0


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(0)


def cmd_check_config(args: argparse.Namespace) -> int:
    config = _load(args.config)
    upstream = config.upstream
    candidates = [f"{h.host}:{h.port}" for h in upstream.hosts] or [f"{upstream.host}:{upstream.port}"]
    print(f"{args.config}: OK (server_id {config.server_id}, upstream {', '.join(candidates)}, "
          f"data_dir {config.data_dir})")
    return 0


def cmd_hash_password(args: argparse.Namespace) -> int:
    try:
        if sys.stdin.isatty():
            password = getpass.getpass("Password: ")
            if getpass.getpass("Again: ") != password:
                print("binlog-relay: the passwords differ", file=sys.stderr)
                return 1
        else:
            password = sys.stdin.readline().rstrip("\r\n")
        password.encode("utf-8")  # bytes a surrogateescape stdin (a C locale) could not decode fail here
    except (UnicodeDecodeError, UnicodeEncodeError):
        print("binlog-relay: the password is not UTF-8 text", file=sys.stderr)
        return 1
    from .protocol.auth import ed25519_password_hash, native_password_hash

    if args.plugin != "ed25519":
        print(native_password_hash(password))
    elif not password:
        # MariaDB keeps an empty string for PASSWORD(''), with which no ed25519 login succeeds
        print("binlog-relay: an ed25519 account needs a password", file=sys.stderr)
        return 1
    else:
        print(ed25519_password_hash(password))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .sandbox.demo import run_demo

    return run_demo(seconds=args.seconds)


def cmd_export(args: argparse.Namespace) -> int:
    # pyspark is imported only here (the optional ``spark`` extra): `run` never needs it.
    from .pipeline.export import cmd_export as export

    return export(args)


def cmd_import(args: argparse.Namespace) -> int:
    import os
    import stat

    from .storage.files import DataDirError
    from .storage.importer import import_binlogs

    for path in args.files:  # the importer says "no such file" of whatever is not a regular file
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue  # the importer's message
        if not stat.S_ISREG(mode):
            what = "is a directory" if stat.S_ISDIR(mode) else "is not a regular file"
            print(f"binlog-relay import: {path}: {what}; nothing was imported", file=sys.stderr)
            return 1
    try:
        result = import_binlogs(args.data_dir, args.files)
    except DataDirError as err:  # the importer's refusals and an unusable data_dir alike
        print(f"binlog-relay import: {err}; nothing was imported", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"binlog-relay import: {err}; nothing was imported", file=sys.stderr)
        return 1
    size = sum(f.size for f in result.imported)
    print(f"imported {len(result.imported)} file(s), {size} bytes, into {result.data_dir} "
          f"(origin server_id {result.imported[-1].origin_server_id}; now {result.files[0]} .. {result.files[-1]})")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    import json

    from .errors import InputError, RelayError
    from .storage.files import DataDirError
    from .storage.search import StoredHistory, parse_moment

    settings = None
    data_dir = args.data_dir
    if args.config:  # the configuration's data_dir, and its archive
        from .app import archive_settings
        from .archive.search import ArchivedHistory

        config = _load(args.config)
        data_dir = config.data_dir
        settings = archive_settings(config)
    try:
        history = StoredHistory(data_dir)
        archived = ArchivedHistory(settings, Path(data_dir)) if settings is not None else None
        if args.time is not None:
            moment = parse_moment(args.time)
            found = history.at_time(moment)
            found = archived.at_time(moment, found) if archived else found
        else:
            found = history.holding(args.gtid)
            found = archived.holding(args.gtid, found) if archived else found
    except (InputError, DataDirError, OSError) as err:
        print(f"binlog-relay search: {err}", file=sys.stderr)
        return 1
    except RelayError as err:  # the archive: the store down, a damaged object
        print(f"binlog-relay search: the archive: {err}", file=sys.stderr)
        return 1
    print(json.dumps(found, indent=2))
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    from .app import archive_settings
    from .archive.archiver import archive_backlog
    from .errors import RelayError

    config = _load(args.config)
    settings = archive_settings(config)
    if settings is None:
        print(f"binlog-relay archive: {args.config} has no archive.url", file=sys.stderr)
        return 1
    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    if args.verify:
        return _verify_archive(settings.store, settings.keks, progress)
    if args.rewrap:
        from .archive.rotation import rewrap_archive
        try:
            rewrapped = rewrap_archive(settings.store, settings.keks, progress)
        except (RelayError, OSError) as err:
            print(f"binlog-relay archive --rewrap: {err}", file=sys.stderr)
            return 1
        print(f"re-wrapped {len(rewrapped.rewrapped)} file(s); {rewrapped.already} were under the current key "
              f"already, {rewrapped.plain} are not encrypted"
              + (f"; {len(rewrapped.deleted)} deleted by archive.retention meanwhile" if rewrapped.deleted else "")
              + (f"; {len(rewrapped.failed)} not re-wrapped:" if rewrapped.failed else "")
              + "".join(f"\n  {failed.name}: {failed.reason}" for failed in rewrapped.failed))
        return 1 if rewrapped.failed else 0
    try:
        result = archive_backlog(settings, Path(config.data_dir), progress)
    except (RelayError, OSError) as err:
        print(f"binlog-relay archive: {err}", file=sys.stderr)
        return 1
    print(f"archived {len(result.archived)} file(s), {result.file_bytes} bytes; {result.already} were archived "
          f"already" + (f"; not archived, their events fail their checks: {', '.join(result.unverifiable)}"
                        if result.unverifiable else ""))
    return 1 if result.unverifiable else 0


def _verify_archive(store: StoreConfig, keks: tuple[Kek, ...], progress: Callable[[str], None]) -> int:
    from .archive.verify import verify_archive
    from .errors import RelayError

    try:
        result = verify_archive(store, keks, progress)
    except (RelayError, OSError) as err:
        print(f"binlog-relay archive --verify: {err}", file=sys.stderr)
        return 1
    print(f"verified {len(result.verified)} file(s), {result.file_bytes} bytes; {len(result.damaged)} damaged"
          + (f"; {len(result.deleted)} deleted by archive.retention meanwhile" if result.deleted else "")
          + "".join(f"\n  {damage.name}: {damage.reason}" for damage in result.damaged))
    return 1 if result.damaged else 0


def _positive_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a number of seconds greater than 0, got {text!r}")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="binlog-relay", description=__doc__)
    parser.add_argument("--version", action="version", version=f"binlog-relay {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the relay in the foreground until SIGTERM/SIGINT")
    run.add_argument("--config", required=True, help="YAML configuration file")
    run.set_defaults(handler=cmd_run)
    check = commands.add_parser("check-config", help="validate a configuration file (exit 2 if invalid)")
    check.add_argument("--config", required=True)
    check.set_defaults(handler=cmd_check_config)
    hashp = commands.add_parser("hash-password",
                                help="print the users[].password_hash of a password read from stdin")
    hashp.add_argument("--plugin", choices=("mysql_native_password", "ed25519"), default="mysql_native_password",
                       help="the authentication plugin whose hash to print: mysql_native_password's as PASSWORD() "
                            "gives it, or ed25519's as mysql.user keeps it (default: %(default)s)")
    hashp.set_defaults(handler=cmd_hash_password)
    demo = commands.add_parser("demo",
                               help="a local MariaDB primary, the relay and a replica of it, live figures, a verdict")
    demo.add_argument("--seconds", type=_positive_seconds, default=None,
                      help="stop after this many seconds instead of waiting for Ctrl-C")
    demo.set_defaults(handler=cmd_demo)
    from .pipeline.export import add_arguments as export_arguments  # argparse only, no pyspark

    export = commands.add_parser("export", help="write the stored binlogs' row changes (or one row per "
                                 "transaction: --view transactions) as Parquet/JSON/CSV "
                                 "with Spark (needs the spark extra)")
    export_arguments(export)
    export.set_defaults(handler=cmd_export)
    imp = commands.add_parser("import", help="seed or extend a data_dir from binlog files, each event checked "
                              "(CRC32, positions, one origin server, files in order); all or nothing")
    imp.add_argument("--data-dir", required=True, help="the relay's data_dir (created if missing)")
    imp.add_argument("files", nargs="+", metavar="FILE", help="binlog files, oldest first")
    imp.set_defaults(handler=cmd_import)
    search = commands.add_parser("search", help="where the stored history holds a moment or GTIDs (JSON on "
                                 "stdout), from its index: for point-in-time recovery")
    where = search.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", help="the relay's data_dir (read only; the relay may run)")
    where.add_argument("--config", help="the relay's configuration: its data_dir, and its archive's files too")
    what = search.add_mutually_exclusive_group(required=True)
    what.add_argument("--time", help="the last transaction committed at or before this moment: "
                      "'YYYY-MM-DD HH:MM:SS' (UTC, or with an offset such as +02:00) or '@SECONDS'")
    what.add_argument("--gtid", help="the transactions of MariaDB GTIDs (0-1-100,1-2-5), or the files "
                      "holding part of a MySQL GTID set (uuid:1-5)")
    search.set_defaults(handler=cmd_search)
    archive = commands.add_parser("archive", help="upload every closed stored file the archive lacks, with a "
                                  "progress line each (the relay stopped: a backlog archived the first time)")
    archive.add_argument("--config", required=True, help="the relay's YAML configuration (archive: and data_dir)")
    mode = archive.add_mutually_exclusive_group()
    mode.add_argument("--verify", action="store_true",
                      help="check instead: read every archived file back and check its events; exit 1 if one is "
                           "damaged (read-only, the relay may run meanwhile; scratch copies in TMPDIR)")
    mode.add_argument("--rewrap", action="store_true",
                      help="key rotation instead: wrap every archived file's data key with encryption_key_file "
                           "(old_encryption_key_files open the old wrappings); the relay may run meanwhile")
    archive.set_defaults(handler=cmd_archive)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
