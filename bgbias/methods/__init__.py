"""DML methods: one registry, one contract (see :mod:`bgbias.methods.base`), one module per method."""
