"""Training and evaluation machinery: the loops that train a method and measure a model."""
