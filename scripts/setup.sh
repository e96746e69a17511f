#!/usr/bin/env bash
# Set up a development environment in .venv on a fresh machine (Python >= 3.11 and the package registries).
# Idempotent: a second run only checks that everything is installed.
#
# On the platform the reference figures are made on (Linux x86-64, CPython 3.11) it installs exactly the
# versions and files of requirements/linux-x86_64-py311.lock (hashes checked, nothing resolved), so two
# set-ups a year apart give the same numbers; scripts/lock.sh regenerates the lock. Elsewhere it resolves
# pyproject.toml's ranges under constraints-dev.txt, and says that the figures may then differ.
#
# --tests also installs what the test suite needs besides Python packages: Chromium, for the study page's
# browser tests (tests/report/test_study_page_browser.py), from Debian's packages where it is missing. Under
# CI=true those tests fail rather than skip without it (tests/conftest.py), so CI cannot pass without them.
set -euo pipefail
cd "$(dirname "$0")/.."
tests=false
for argument in "$@"; do
    case "$argument" in
        --tests) tests=true ;;
        *) echo "scripts/setup.sh: unknown option $argument (the one option is --tests)" >&2; exit 2 ;;
    esac
done
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
if $tests && ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "scripts/setup.sh: installing Chromium for the browser tests (Debian's chromium package)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            chromium >/dev/null
    else
        echo "scripts/setup.sh: the browser tests need Chromium on PATH: install it (Debian and Ubuntu:" \
             "sudo apt-get install --no-install-recommends chromium) and run this again" >&2
        exit 1
    fi
fi
