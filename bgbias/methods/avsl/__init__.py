"""AVSL: attributable visual similarity learning, a graph over three levels' embedding dimensions
(docs/methods/avsl.md)."""
