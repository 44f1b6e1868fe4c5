#!/usr/bin/env bash
# scripts/faults.sh - the fault suite's long run (issue 10 section 3; RELIABILITY.md has the figures).
#
# Usage: bash scripts/faults.sh [pytest arguments...]
#   e.g. bash scripts/faults.sh                          every class, long counts
#        bash scripts/faults.sh -k kill9                 one class
#        FAULTS_SCALE=short bash scripts/faults.sh       the default suite's counts, fault tests only
#
# The default test run (scripts/test.sh) runs tests/faults with the short counts; this runs the same
# tests with FAULTS_SCALE=long: 200 kill -9 cycles, 100 proxy faults of each kind on each leg, 100,000
# hostile clients, 5x the data past stuck and slow replicas. Prints each class's figures (lines
# starting with FAULTS). Runs as root (the disk-full test mounts a tmpfs), as scripts/test.sh does.
# The long run writes its figures into RELIABILITY.md (the rows of the classes that ran and passed,
# between its fault-figures markers: tests/support/faultfigures.py); FAULTS_FIGURES=PATH writes another
# file, FAULTS_FIGURES= (empty) none. A short run writes nothing unless FAULTS_FIGURES is set.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export FAULTS_SCALE="${FAULTS_SCALE:-long}"
# One process (scripts/test.sh runs two by default): each class's figures printed as they come (-s),
# its faults not sharing the machine with another class's, and one writer of RELIABILITY.md.
export TEST_WORKERS="${TEST_WORKERS:-0}"
if [[ $FAULTS_SCALE == long ]]; then
  export FAULTS_FIGURES="${FAULTS_FIGURES-RELIABILITY.md}"
fi
exec bash scripts/test.sh tests/faults -s -p no:cacheprovider --timeout=7200 "$@"
