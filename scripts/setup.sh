#!/usr/bin/env bash
# Set up a development environment in .venv on a fresh machine (Python >= 3.10 and the package registries).
# Idempotent: a second run only checks that everything is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c constraints-dev.txt -e ".[dev]"
