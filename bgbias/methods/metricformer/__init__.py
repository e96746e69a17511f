"""MetricFormer: a transformer over the last feature map (docs/methods/metricformer.md)."""
