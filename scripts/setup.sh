#!/usr/bin/env bash
# Set up a development environment in .venv on a fresh machine (Python >= 3.11 and the package registries).
# Idempotent: a second run only checks that everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
# 3.11, as pyproject.toml requires: rembg >= 2.0.86, the version bgbias's masks are proven identical to,
# requires it (bgbias's own code needs nothing newer than 3.10). Fail here rather than deep inside pip.
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "scripts/setup.sh: bgbias needs Python >= 3.11, python3 is $(python3 -V 2>&1)" >&2
    exit 1
}
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints-dev.txt -e ".[dev]"
