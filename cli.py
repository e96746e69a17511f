"""Lets ``python cli.py ...`` work from a checkout; the real command line lives in ``bgbias/cli.py``."""

from bgbias.cli import main

if __name__ == "__main__":
    main()
