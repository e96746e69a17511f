"""``python cli.py ...`` from a checkout is the ``bgbias`` command (the design card's entry point)."""

from bgbias.cli import main

if __name__ == "__main__":
    main()
