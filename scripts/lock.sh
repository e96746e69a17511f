#!/usr/bin/env bash
# Regenerate the lock scripts/setup.sh installs from: every package version of the development set-up (the
# package, its tensorboard/dev extras, pip and setuptools), with the sha256 of every file pip may fetch.
# Run it after changing pyproject.toml's dependencies or constraints-dev.txt, then commit the lock.
#
# The lock is for the platform the reference figures are made on (Linux x86-64, CPython 3.11). Every package
# comes from PyPI, torch and torchvision included: PyPI's torch build carries CUDA and runs on CPUs as well, so
# one lock serves the CPU development machines and a GPU node (docs/install.md).
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9
LOCK=requirements/linux-x86_64-py311.lock

tools=$(mktemp -d)
trap 'rm -rf "$tools"' EXIT
python3 -m venv "$tools"
"$tools/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
# --custom-compile-command keeps the machine's paths out of the header, so equal inputs give equal bytes.
"$tools/bin/uv" pip compile pyproject.toml requirements/build.in --extra dev -c constraints-dev.txt \
    --generate-hashes --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
    --index-url https://pypi.org/simple \
    --custom-compile-command "bash scripts/lock.sh" --quiet -o "$LOCK"
echo "wrote $LOCK"
