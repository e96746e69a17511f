"""Training and evaluation machinery: retrieval, metrics, and the loops that produce what they score."""
