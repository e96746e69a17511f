"""``python -m bgbias`` is the same as the ``bgbias`` command."""

from bgbias.cli import main

main()
