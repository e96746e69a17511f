"""``python -m bgbias`` is the ``bgbias`` command; ``torchrun -m bgbias train ...`` needs a module to run."""

from bgbias.cli import main

main()
