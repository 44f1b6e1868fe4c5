#!/usr/bin/env bash
# scripts/test.sh - the project's test command (README, .ci/run).
#
# Usage: bash scripts/test.sh [pytest arguments...]
#   e.g. bash scripts/test.sh tests/unit        bash scripts/test.sh -k sandbox --run-slow
#
# Makes sure what the tests need is installed, runs the linters, then runs pytest:
#   1. MariaDB server and client (the integration tests start their own throw-away servers,
#      see tests/support/mariadb.py), and mariadb-backup (the point-in-time recovery test,
#      tests/integration/test_pitr.py; it must be the server's version, as Debian's packages
#      are): installed with apt-get when missing and run as root, otherwise the script says what
#      to install and exits 1. The packaged service is not needed and is kept from starting.
#   2. gcc and Python's C headers, for the compiled inner loop (relay/binlog/_scan.c), which
#      the tests require (without them the relay itself runs, slower): apt-get as for MariaDB.
#   3. The project and its test extra: pip install -e '.[test]'.
#   4. ruff over relay, tests and bench, and mypy over relay (both configured in pyproject.toml,
#      both from the test extra): any finding fails the script before pytest starts, whatever
#      the pytest arguments.
#   5. pytest, the tests spread over TEST_WORKERS processes (pytest-xdist; default 2, 0 runs them
#      in this one), a test file's tests all in one process (their module fixtures made once).
# Env: PYTHON (default python3), TEST_WORKERS (default 2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/setup.sh
source scripts/setup.sh

install_mariadb
install_debian "MariaDB backup" mariadb-backup mariadb-backup  # tests/integration/test_pitr.py
install_debian Prometheus promtool prometheus  # promtool checks the /metrics output
install_debian mysqld_exporter prometheus-mysqld-exporter prometheus-mysqld-exporter  # scrapes the relay (tests/integration/test_mysqld_exporter.py)
install_debian Java java openjdk-17-jre-headless  # Spark, for the pipeline tests
install_debian zstd zstd zstd  # the archive's objects must decompress with the plain zstd tool
install_debian FUSE fusermount3 fuse3  # the power-cut file system of tests/faults/test_powercut.py
install_c_build_tools
install_python_deps '.[test]'
bash scripts/install-tools.sh  # helm, hadolint, kubernetes-validate for tests/deploy
"$PYTHON" -m ruff check relay tests bench
"$PYTHON" -m mypy relay  # tests/ is not type-checked (yet)
exec "$PYTHON" -m pytest -q -ra --timeout=600 --durations=25 -n "${TEST_WORKERS:-2}" --dist loadfile "$@"
