"""The fixtures of BGAugment's tests (a tiny bench with saliency masks, two background pools), shared."""

from tests.bgaugment.conftest import backgrounds, bench, masks_dir  # noqa: F401
