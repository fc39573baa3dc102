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

import io
import os
import random

import torch.utils.data

from .hint import HintedSampler
from .schedule import FidelitySchedule
from .store import Store

__all__ = ["ImageFolder", "RecordDataset", "HintedSampler", "FidelitySchedule", "default_loader"]


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
            return self._item(f, target)

    def _item(self, f, target):
        """(transform(loader(f)), target_transform(target))."""
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


class RecordDataset(torch.utils.data.IterableDataset):
    """The files of `root` read as the PCR paper's reader reads them: records in a seeded
    shuffled order, each record's level-K prefix read with one sequential read into memory (one
    ranged GET from a remote store, whatever the size of its cache), its files cut from it,
    every piece checked, and mixed through a shuffle buffer of `shuffle_buffer` files (which
    holds their bytes: memory ~ shuffle_buffer x a file's size, plus a record's prefix). Yields
    (transform(loader(file)), target_transform(target)) with ImageFolder's targets (its
    classes, class_to_idx, samples and targets are here too).

    Work is split by record between ranks (`rank`/`world_size`, else torch.distributed's, else
    the RANK and WORLD_SIZE variables, else one) and DataLoader workers, so that every file of
    `root` is yielded exactly once per epoch across all of them. `set_epoch(e)` reshuffles
    (records and buffer, from `seed` and e). `state_dict()` / `load_state_dict()` resume an
    epoch after what was consumed: without workers, the samples this object yielded; with W
    workers, pass ``state_dict(batches=N, batch_size=B)`` (N batches taken from the DataLoader,
    which takes them from its workers in turn), which holds until a worker's share ends."""

    def __init__(self, store, root="train", scans=None, shuffle=True, seed=0, shuffle_buffer=1024,
                 rank=None, world_size=None, loader=None, transform=None, target_transform=None,
                 is_valid_file=None, **options):
        super().__init__()
        self.store = _store_of(store, scans, options)
        self._folder = ImageFolder(self.store, root=root, transform=transform,
                                   target_transform=target_transform, loader=loader,
                                   is_valid_file=is_valid_file)
        self.root = self._folder.root
        self.classes = self._folder.classes
        self.class_to_idx = self._folder.class_to_idx
        self.samples = self._folder.samples
        self.targets = self._folder.targets
        self.shuffle = bool(shuffle)
        self.seed = seed
        self.shuffle_buffer = max(1, int(shuffle_buffer))
        self.rank, self.world_size = rank, world_size
        session = self.store._live()
        self._inos = [session.resolve(p) for p, _ in self.samples]
        placements = session.placements(self._inos)
        by_record = {}
        for i, (record, slot) in enumerate(placements):
            by_record.setdefault(record, []).append((slot, i))
        # [(record, its samples in slot order)]: in that order a record's prefix is read front
        # to back.
        self.records = [(record, [i for _, i in sorted(files)])
                        for record, files in sorted(by_record.items())]
        # The epoch and the state to resume from live in shared memory (made before any
        # DataLoader worker exists), so that persistent workers, which keep their copy of the
        # dataset from one epoch to the next, see set_epoch and load_state_dict: [epoch, kind
        # (0: none, 1: samples, 2: batches), samples or batches, batch_size].
        self._shared = torch.zeros(4, dtype=torch.int64).share_memory_()
        self._yielded = 0

    @property
    def epoch(self):
        return int(self._shared[0])

    @epoch.setter
    def epoch(self, epoch):
        self._shared[0] = int(epoch)

    @property
    def _resume(self):
        kind, a, b = (int(x) for x in self._shared[1:])
        if kind == 1:
            return {"samples": a}
        if kind == 2:
            return {"batches": a, "batch_size": b}
        return {}

    def __len__(self):
        return len(self.samples)

    def set_epoch(self, epoch):
        """Reshuffles for epoch `epoch`; call between epochs, before iter(loader) (persistent
        workers too)."""
        self._shared[:] = torch.tensor([int(epoch), 0, 0, 0])

    def state_dict(self, batches=None, batch_size=None):
        state = {"epoch": self.epoch, "seed": self.seed}
        if batches is None:
            state["samples"] = self._yielded
        else:
            state.update(batches=int(batches), batch_size=int(batch_size))
        return state

    def load_state_dict(self, state):
        if state["seed"] != self.seed:
            raise ValueError(f"state of seed {state['seed']}, dataset of seed {self.seed}")
        if "batches" in state:
            resume = [2, int(state["batches"]), int(state["batch_size"])]
        else:
            resume = [1, int(state.get("samples", 0)), 0]
        self._shared[:] = torch.tensor([int(state["epoch"])] + resume)

    def _partition(self):
        """(shard, shards, worker, workers): this iterator's share of the epoch's records."""
        rank, world = self.rank, self.world_size
        if rank is None or world is None:
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                rank, world = dist.get_rank(), dist.get_world_size()
            else:
                rank = int(os.environ.get("RANK", 0))
                world = int(os.environ.get("WORLD_SIZE", 1))
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} of world_size {world}")
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return rank * workers + worker, world * workers, worker, workers

    def _skip(self, worker, workers):
        """Samples of this worker's stream consumed before the state it resumes from."""
        state = self._resume
        if "batches" in state:
            return state["batch_size"] * len(range(worker, state["batches"], workers))
        if workers > 1 and state.get("samples"):
            raise ValueError("with DataLoader workers, resume from state_dict(batches=N, "
                             "batch_size=B)")
        return state.get("samples", 0)

    def _events(self, shard, shards):
        """This shard's epoch: ("record", id) when a record's files enter the buffer, ("sample",
        index) when a file leaves it, in order. It depends on the seed, the epoch and the shard
        only, so a resumed iterator replays it without reading anything."""
        order = list(range(len(self.records)))
        if self.shuffle:
            random.Random(f"pcrfs:{self.seed}:{self.epoch}").shuffle(order)
        rng = random.Random(f"pcrfs:{self.seed}:{self.epoch}:{shard}")
        buffer = []
        for r in order[shard::shards]:
            record, indices = self.records[r]
            yield "record", record
            for i in indices:
                if not self.shuffle:
                    yield "sample", i
                    continue
                buffer.append(i)
                if len(buffer) >= self.shuffle_buffer:
                    yield "sample", _pop_random(buffer, rng)
        while buffer:
            yield "sample", _pop_random(buffer, rng)

    def __iter__(self):
        shard, shards, worker, workers = self._partition()
        skip = self._skip(worker, workers)
        session = self.store._live()
        files = {r: indices for r, indices in self.records}
        held = {}  # sample index -> its bytes (or the exception reading it gave)
        n = 0
        for kind, x in self._events(shard, shards):
            if kind == "record":
                if n >= skip:  # while skipping, nothing is read
                    indices = files[x]
                    read = session.read_record(x, [self._inos[i] for i in indices])
                    held.update(zip(indices, read))
                continue
            n += 1
            data = held.pop(x, None)
            if n <= skip:
                continue
            self._yielded = n
            if data is None:  # its record was passed over by a resume: read it alone
                yield self._folder[x]
                continue
            if isinstance(data, BaseException):
                raise data
            yield self._folder._item(io.BytesIO(data), self._folder.targets[x])


def _pop_random(buffer, rng):
    j = rng.randrange(len(buffer))
    buffer[j], buffer[-1] = buffer[-1], buffer[j]
    return buffer.pop()
