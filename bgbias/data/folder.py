"""A user's own dataset: ``root/<class_name>/<image>``, one sub-folder per class, images directly inside.
Labels are the class folders' indices in sorted order. Split: the first half of the classes (rounded up) is
trainval, its first 75 % train (at least one class each); the second half is test.
"""

from __future__ import annotations

from pathlib import Path

from bgbias.data.images import image_files
from bgbias.data.items import Catalog, Dataset, Item, make_item
from bgbias.data.layout import subfolders
from bgbias.data.registry import register_dataset
from bgbias.errors import DatasetError


@register_dataset("folder")
class FolderDataset(Dataset):
    index_file = ""
    obtain = "put one sub-folder per class under the dataset root, with the images directly inside"
    default_folder = None  # a user's own dataset has no usual place: its root is always given

    def _read_catalog(self) -> Catalog:
        class_folders = subfolders(self.root)
        if not class_folders:
            looks_like_one_class = bool(image_files(self.root))
            raise DatasetError(
                "the dataset folder has no class sub-folders",
                path=self.root,
                fix=f"it holds images itself: if it is one class folder, pass its parent {self.root.parent}"
                if looks_like_one_class
                else self.obtain,
            )
        items = [item for label, folder in enumerate(class_folders)
                 for item in self._class_items(folder, label)]
        classes = list(range(len(class_folders)))
        trainval_count, train_count = folder_split_sizes(len(classes))
        names = {label: folder.name for label, folder in enumerate(class_folders)}
        return Catalog(items, classes[:trainval_count], classes[trainval_count:], train_count, names)

    def _class_items(self, folder: Path, label: int) -> list[Item]:
        files = image_files(folder)
        if not files:
            nested = [child for child in subfolders(folder) if image_files(child)]
            fix = (
                f"images must lie directly in the class folders; if the sub-folders of {folder} are the "
                f"classes, pass {folder} as the dataset root"
                if nested
                else "add images to it or remove it"
            )
            raise DatasetError(f"class folder {folder.name!r} has no images directly inside", path=folder,
                               fix=fix)
        return [make_item(self.root, f"{folder.name}/{name}", label) for name in files]


def folder_split_sizes(class_count: int) -> tuple[int, int]:
    """(trainval classes, train classes) for a folder dataset with ``class_count`` classes."""
    trainval = (class_count + 1) // 2
    train = (3 * trainval + 2) // 4  # 75 %, rounded half up
    if trainval >= 2:
        train = min(max(train, 1), trainval - 1)
    return trainval, train
