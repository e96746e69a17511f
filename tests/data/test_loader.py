"""ImageLoader: an error met while reading a sample reaches the caller whole, from a worker process too."""

from __future__ import annotations

import pickle

import pytest
import torch

from bgbias.data.loader import ImageLoader
from bgbias.engine.checkpoint import CheckpointError
from bgbias.errors import BgbiasError, ImageError, OutputError


class _Samples:
    """Four samples; the third cannot be read."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> dict:
        if index == 2:
            raise ImageError("image file is truncated", path="/data/c.jpg", fix="re-download it")
        return {"image": torch.full((3, 2, 2), index, dtype=torch.uint8), "label": index}


@pytest.mark.parametrize("workers", [0, 1])
def test_an_unreadable_sample_raises_its_own_error_naming_the_file(workers):
    loader = ImageLoader(_Samples(), batch_size=2, num_workers=workers)
    batches = iter(loader)
    assert next(batches)["label"].tolist() == [0, 1]
    with pytest.raises(ImageError) as info:
        next(batches)
    assert info.value.path == "/data/c.jpg" and info.value.problem == "image file is truncated"
    assert info.value.fix.startswith("re-download it; ") and "bgbias masks" in info.value.fix
    assert "Traceback" not in info.value.render()


@pytest.mark.parametrize("kind", [BgbiasError, ImageError, OutputError, CheckpointError])
def test_errors_pickle_whole(kind):
    error = kind("broken", path="/x/y.png", fix="mend it")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is kind and (again.problem, again.path, again.fix) == ("broken", "/x/y.png", "mend it")


class _Readable(_Samples):
    def __getitem__(self, index: int) -> dict:
        return {"image": torch.full((3, 2, 2), index, dtype=torch.uint8), "label": index}


def test_close_ends_persistent_workers_while_the_loader_lives():
    # A persistent worker outlives its epoch as long as the loader; one left at interpreter exit hung the
    # study's dry run on CUDA. close() ends it with the loader still referenced.
    import multiprocessing

    loader = ImageLoader(_Readable(), batch_size=2, num_workers=1, persistent_workers=True)
    assert [batch["label"].tolist() for batch in loader] == [[0, 1], [2, 3]]
    assert multiprocessing.active_children()
    loader.close()
    assert multiprocessing.active_children() == []
    assert [batch["label"].tolist() for batch in loader] == [[0, 1], [2, 3]]  # it starts workers anew
    loader.close()
