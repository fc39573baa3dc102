"""PyTorch datasets over a pcrfs store, with or without a mount.

Without a mount (no FUSE, no privileges: a Kubernetes pod, a laptop)::

    import torch, torchvision.transforms as T
    from pcrfs.torch import ImageFolder
    data = ImageFolder("s3://bucket/imagenet.pcr", root="train", scans=5,
                       transform=T.Compose([T.RandomResizedCrop(224), T.ToTensor()]),
                       remote_cache="2G")
    loader = torch.utils.data.DataLoader(data, batch_size=256, shuffle=True, num_workers=8)

``ImageFolder`` has torchvision's ``classes``, ``class_to_idx``, ``samples`` (paths relative to
the store), ``targets`` and ``imgs``, found by the same rules (torchvision's image extensions,
sorted classes and files), and reads each sample through ``pcrfs.Store``: the same bytes as
torchvision's ImageFolder over a mount at that level. A ``loader`` gets a binary file object
(``Store.open``), not a path; the default one is torchvision's: PIL, converted to RGB.

Over a mount, ``HintedSampler`` (pcrfs.hint) tells the daemon each epoch's order as it starts,
so a remote store's files are fetched ahead in the order they will be read::

    from pcrfs.torch import HintedSampler
    from pcrfs.hint import Hinter
    data = torchvision.datasets.ImageFolder("/mnt/imagenet/train")
    sampler = HintedSampler(torch.utils.data.RandomSampler(data),
                            [p for p, _ in data.samples], Hinter("/mnt/imagenet"))
    loader = torch.utils.data.DataLoader(data, sampler=sampler, num_workers=8)

This module imports torch (``import pcrfs`` and pcrfs.hint never do); torchvision is imported
when an ImageFolder is made. Workers:
``DataLoader(num_workers=N)`` works under fork, spawn and forkserver; each worker opens the store
itself (pcrfs.Store), and pickling a dataset carries its store's URL and options only.
"""

import os

import torch.utils.data

from .hint import HintedSampler
from .store import Store

__all__ = ["ImageFolder", "HintedSampler", "default_loader"]


def default_loader(f):
    """torchvision's default loader for a file object: PIL, converted to RGB."""
    from PIL import Image
    image = Image.open(f)
    return image.convert("RGB")


def _store_of(store, scans, options):
    if isinstance(store, Store):
        if options:
            raise ValueError("options go to the Store when a Store is given: "
                             + ", ".join(sorted(options)))
        if scans is not None and scans != store.scans:
            raise ValueError(f"scans={scans}, but the Store given serves level {store.scans}")
        return store
    return Store(store, scans=scans, **options)


class ImageFolder(torch.utils.data.Dataset):
    """torchvision.datasets.ImageFolder over the folder `root` of a pcrfs store (a Store, or
    a URL or path opened with `scans` and `options`, the mount's -o options). Items are
    (transform(loader(file)), target_transform(class index)); loader gets a binary file object
    of the sample (default: PIL, RGB)."""

    def __init__(self, store, root="train", scans=None, transform=None, target_transform=None,
                 loader=None, is_valid_file=None, **options):
        from torchvision.datasets.folder import IMG_EXTENSIONS, has_file_allowed_extension
        self.store = _store_of(store, scans, options)
        self.root = os.fspath(root).strip("/")
        self.transform = transform
        self.target_transform = target_transform
        self.loader = loader if loader is not None else default_loader
        self.extensions = IMG_EXTENSIONS if is_valid_file is None else None
        if is_valid_file is None:
            def is_valid_file(path):
                return has_file_allowed_extension(path, IMG_EXTENSIONS)
        self.classes, self.class_to_idx = self.find_classes(self.root)
        self.samples = self.make_dataset(self.root, self.class_to_idx, is_valid_file)
        self.targets = [target for _, target in self.samples]
        self.imgs = self.samples

    def _join(self, *parts):
        return "/".join(p for p in parts if p)

    def find_classes(self, directory):
        """Sorted names of the folders in `directory`, and their indices (torchvision's rule)."""
        classes = sorted(name for name, is_dir in self.store.scandir(directory) if is_dir)
        if not classes:
            raise FileNotFoundError(f"Couldn't find any class folder in {directory}.")
        return classes, {name: i for i, name in enumerate(classes)}

    def make_dataset(self, directory, class_to_idx, is_valid_file):
        """[(path relative to the store, class index)], as torchvision's make_dataset orders
        them: classes sorted, each class folder walked in sorted order, files sorted."""
        instances = []
        available = set()
        for target_class in sorted(class_to_idx):
            class_index = class_to_idx[target_class]
            target_dir = self._join(directory, target_class)
            for dirpath, _, fnames in sorted(self.store.walk(target_dir)):
                for fname in sorted(fnames):
                    path = self._join(dirpath, fname)
                    if is_valid_file(path):
                        instances.append((path, class_index))
                        available.add(target_class)
        empty = set(class_to_idx) - available
        if empty:
            msg = f"Found no valid file for the classes {', '.join(sorted(empty))}. "
            if self.extensions is not None:
                msg += f"Supported extensions are: {', '.join(self.extensions)}"
            raise FileNotFoundError(msg)
        return instances

    def __getitem__(self, index):
        path, target = self.samples[index]
        with self.store.open(path) as f:
            sample = self.loader(f)
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

    def __len__(self):
        return len(self.samples)

    def __repr__(self):
        return (f"pcrfs.torch.ImageFolder({self.store!r}, root={self.root!r}): "
                f"{len(self.samples)} samples, {len(self.classes)} classes")
