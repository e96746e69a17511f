"""DCML (Deep Causal Metric Learning): the method in ``method.py``, its parts in the other modules."""
