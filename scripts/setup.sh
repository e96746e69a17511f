#!/usr/bin/env bash
# Set up a development environment in .venv on a fresh machine (Python >= 3.11 and the package registries).
# Idempotent: a second run only checks that everything is installed.
#
# On the platform the reference figures are made on (Linux x86-64, CPython 3.11) it installs exactly the
# versions and files of requirements/linux-x86_64-py311.lock (hashes checked, nothing resolved), so two
# set-ups a year apart give the same numbers; scripts/lock.sh regenerates the lock. Elsewhere it resolves
# pyproject.toml's ranges under constraints-dev.txt, and says that the figures may then differ.
set -euo pipefail
cd "$(dirname "$0")/.."
# 3.11, as pyproject.toml requires: rembg >= 2.0.86, the version bgbias's masks are proven identical to,
# requires it (bgbias's own code needs nothing newer than 3.10). Fail here rather than deep inside pip.
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "scripts/setup.sh: bgbias needs Python >= 3.11, python3 is $(python3 -V 2>&1)" >&2
    exit 1
}
LOCK=requirements/linux-x86_64-py311.lock
pip=(.venv/bin/python -m pip --disable-pip-version-check)
python3 -m venv .venv
if python3 -c 'import platform, sys; sys.exit(not (sys.platform == "linux" and platform.machine() == "x86_64"
                and sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11)))'; then
    # Every locked file is on PyPI, torch's CUDA-enabled build included (it runs on CPUs as well).
    "${pip[@]}" install --quiet --require-hashes --no-deps -r "$LOCK"
    # Without build isolation, so the locked setuptools builds it (an isolated build would fetch the newest).
    "${pip[@]}" install --quiet --no-deps --no-build-isolation -e .
else
    echo "scripts/setup.sh: $LOCK is for Linux x86-64 and CPython 3.11; resolving pyproject.toml's ranges" \
         "instead, so package versions (and the last digits of the figures) may differ from the docs'" >&2
    "${pip[@]}" install --quiet --upgrade pip
    "${pip[@]}" install --quiet -c constraints-dev.txt -e ".[dev]"
fi
