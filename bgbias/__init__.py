"""bgbias: measure how much a deep metric learning model relies on image backgrounds, and train it to rely
less.

The package is grouped by pipeline stage: ``assets`` (offline provisioning), ``data`` (datasets and images),
``backgrounds`` and ``bench`` (background pools and the embedded bench dataset), ``saliency`` (U²-Net masks),
``augment`` (compositing), ``models``, ``methods``, ``engine``, ``explain`` and ``report``.
Importing the package is cheap: heavy libraries (torch, rembg, faiss) are imported by the functions that need
them.
"""

__version__ = "0.1.0"
