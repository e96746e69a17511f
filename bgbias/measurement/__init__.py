"""The measurement core: a request in, the typed report and its scores out, in one pass down the layers
(:mod:`bgbias.measurement.measure`; docs/design.md, *The evaluation's data path*)."""
