"""Which level a training run reads, epoch by epoch (pcrfs.torch.FidelitySchedule).

    from pcrfs.torch import FidelitySchedule, ImageFolder
    data = ImageFolder("s3://bucket/imagenet.pcr", root="train", scans=10, transform=...)
    loader = torch.utils.data.DataLoader(data, batch_size=256, shuffle=True, num_workers=8,
                                         persistent_workers=True)
    schedule = FidelitySchedule(data, levels={0: 1, 10: 2, 20: 5})          # fixed steps
    schedule = FidelitySchedule.ramp(data, 0, 30, low=1, high=10)            # FFCV-like ramp
    schedule = FidelitySchedule(data, every=5, model=model, loss_fn=loss_fn, # tuned
                                batches=pcrfs.tune.store_batches(...))
    for epoch in range(90):
        schedule.set_epoch(epoch)            # before iter(loader): this epoch's level
        for images, targets in loader: ...

Datasets it switches: pcrfs.torch.ImageFolder and RecordDataset (their `store` is replaced by
one that opens the store at the scheduled level), and a folder dataset over a mount without
``-o scans`` (torchvision's ImageFolder or DatasetFolder over ``MNT/scanK/...``: its loader is
given the path under the scheduled ``scanJ``); Subset and ConcatDataset are followed to them.

The level lives in one integer in shared memory (a torch tensor, share_memory_()), made before
any DataLoader worker exists, that every copy of the dataset reads: workers under fork, spawn
and forkserver, persistent or not, see a level set in the main process from the next item they
make. set_epoch(e) must be called between epochs, before iter(loader) (which is when a
DataLoader sends its first indices, and when a persistent worker restarts an IterableDataset):
then every item of epoch e, and none before, is read at e's level. A store opened at another
level is another pcrfs.Store, with caches of its own, so no byte of the old level is served
after a switch.
"""

import bisect
import math
import os
import re

import torch

from .store import Store

__all__ = ["FidelitySchedule"]

_SCAN_COMPONENT = re.compile(r"scan([1-9]|10)")


def _check_level(k, what="level"):
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 10:
        raise ValueError(f"{what} {k!r}: expected an integer in 1..10")
    return k


class _Level:
    """The scheduled level, shared by every process that holds a copy (pickled for spawn
    through torch's shared-memory reduction; inherited under fork)."""

    def __init__(self, k):
        self.cell = torch.tensor([k], dtype=torch.int32).share_memory_()

    def get(self):
        return int(self.cell[0])

    def set(self, k):
        self.cell[0] = k


class ScheduledStore:
    """A pcrfs.Store whose level is the schedule's: every call goes to a Store of this process
    at the current level, opened at its first use (the previous level's is dropped). Pickles as
    the URL, the options and the shared level."""

    def __init__(self, store, level):
        self.url = store.url
        self.options = dict(store.options)
        self._level = level
        self._stores = {store.scans: store}

    @property
    def scans(self):
        return self._level.get()

    def current(self):
        k = self._level.get()
        store = self._stores.get(k)
        if store is None:
            store = Store(self.url, scans=k, **self.options)
            self._stores = {k: store}
        return store

    def __getattr__(self, name):
        if name.startswith("__") or name in ("url", "options", "_level", "_stores"):
            raise AttributeError(name)
        return getattr(self.current(), name)

    def __getstate__(self):
        return {"url": self.url, "options": self.options, "level": self._level}

    def __setstate__(self, state):
        self.url, self.options, self._level = state["url"], state["options"], state["level"]
        self._stores = {}

    def __repr__(self):
        return f"pcrfs.ScheduledStore({self.url!r}, scans={self.scans})"


class ScheduledPathLoader:
    """A folder dataset's loader over a mount: the path's ``MNT/scanK/`` becomes the scheduled
    level's ``MNT/scanJ/`` before `loader` opens it."""

    def __init__(self, loader, mount, level):
        self.loader = loader
        self.mount = mount
        self._level = level

    def path(self, path):
        rest = os.path.relpath(path, self.mount)
        head, _, tail = rest.partition(os.sep)
        if not _SCAN_COMPONENT.fullmatch(head) or rest.startswith(".."):
            raise ValueError(f"{path}: not under {self.mount}/scanK")
        return os.path.join(self.mount, f"scan{self._level.get()}", tail)

    def __call__(self, path):
        return self.loader(self.path(path))


def _mount_of(root):
    """(the mount's root, K) of a folder MNT/scanK/...: the last scanK component of root."""
    parts = os.path.abspath(os.fspath(root)).split(os.sep)
    for i in range(len(parts) - 1, 0, -1):
        if _SCAN_COMPONENT.fullmatch(parts[i]):
            return os.sep.join(parts[:i]) or os.sep, int(parts[i][4:])
    raise ValueError(f"{root}: no scanK component (a pcrfs mount without -o scans shows every "
                     "level under MNT/scan1..scan10; a mount with -o scans=K cannot switch)")


class FidelitySchedule:
    """The level that `datasets` (one dataset or a list) serve in each epoch, set by
    set_epoch(e):

    - levels={epoch: level}: from that epoch on, that level (before the first key: the first
      value); or levels=callable(epoch) -> level.
    - every=N with model, loss_fn, batches (and select_scans's scans, threshold, reference,
      num_batches): pcrfs.tune.select_scans on the model as it is at epochs 0, N, 2N, ...; the
      level chosen holds until the next.

    .level is the level served now, .history [(epoch, level, Selection or None)] each change
    or tuning."""

    def __init__(self, datasets, levels=None, *, every=None, model=None, loss_fn=None,
                 batches=None, **tune_options):
        if (levels is None) == (every is None):
            raise ValueError("FidelitySchedule: give levels (fixed) or every=N (tuned)")
        if every is not None:
            if isinstance(every, bool) or not isinstance(every, int) or every < 1:
                raise ValueError(f"every={every!r}: a number of epochs, at least 1")
            if model is None or loss_fn is None or batches is None:
                raise ValueError("FidelitySchedule(every=N) needs model, loss_fn and batches")
        elif model is not None or loss_fn is not None or batches is not None or tune_options:
            raise ValueError("model, loss_fn, batches and tuning options go with every=N")
        if isinstance(levels, dict):
            if not levels:
                raise ValueError("levels: an empty dict")
            for e, k in levels.items():
                _check_level(k, f"levels[{e!r}]")
            self._steps = sorted(levels.items())
        elif levels is not None and not callable(levels):
            raise ValueError("levels: a dict {epoch: level} or a function of the epoch")
        self.levels = levels
        self.every = every
        self.model, self.loss_fn, self.batches = model, loss_fn, batches
        self.tune_options = tune_options
        self.history = []
        self.epoch = None
        self._tuned = None
        if not isinstance(datasets, (list, tuple)):
            datasets = [datasets]
        found = []
        for d in datasets:
            _leaves(d, found)
        if not found:
            raise ValueError("FidelitySchedule: no dataset it can switch")
        first = _served_level(found[0])
        self._level = _Level(first)
        for d in found:
            _attach(d, self._level)

    @classmethod
    def ramp(cls, datasets, start_epoch, end_epoch, low=1, high=10, steps=(1, 2, 3, 5, 10)):
        """FFCV's ramp for levels: `low` until start_epoch, `high` from end_epoch, in between
        the linear interpolation rounded up to the next of `steps`."""
        _check_level(low, "low")
        _check_level(high, "high")
        steps = sorted(set(_check_level(k, "steps") for k in steps) | {low, high})

        def level(epoch):
            if epoch <= start_epoch or end_epoch <= start_epoch:
                x = low if epoch < end_epoch else high
            elif epoch >= end_epoch:
                x = high
            else:
                x = low + (high - low) * (epoch - start_epoch) / (end_epoch - start_epoch)
            return next(k for k in steps if k >= math.ceil(x - 1e-9))
        return cls(datasets, level)

    @property
    def level(self):
        return self._level.get()

    def level_for(self, epoch):
        """The fixed schedule's level at `epoch` (not for a tuned schedule)."""
        if self.levels is None:
            raise ValueError("a tuned schedule's level is known when set_epoch tunes")
        if callable(self.levels):
            return _check_level(self.levels(epoch), f"levels({epoch})")
        i = bisect.bisect_right([e for e, _ in self._steps], epoch) - 1
        return self._steps[max(i, 0)][1]

    def set_epoch(self, epoch):
        """Sets epoch's level (tuning first where due); call it before iter(loader)."""
        self.epoch = epoch
        selection = None
        if self.every is None:
            k = self.level_for(epoch)
        elif self._tuned is None or epoch - self._tuned >= self.every or epoch < self._tuned:
            from .tune import select_scans
            selection = select_scans(self.model, self.loss_fn, self.batches, **self.tune_options)
            self._tuned = epoch
            k = selection.scans
        else:
            k = self.level
        if selection is not None or k != self.level or not self.history:
            self.history.append((epoch, k, selection))
        self._level.set(k)
        return k


def _leaves(dataset, out):
    """The datasets below Subset and ConcatDataset."""
    if isinstance(dataset, torch.utils.data.Subset):
        _leaves(dataset.dataset, out)
    elif isinstance(dataset, torch.utils.data.ConcatDataset):
        for d in dataset.datasets:
            _leaves(d, out)
    else:
        out.append(dataset)


def _served_level(dataset):
    store = getattr(dataset, "store", None)
    if isinstance(store, (Store, ScheduledStore)):
        return store.scans
    return _mount_of(_folder_root(dataset))[1]


def _folder_root(dataset):
    root = getattr(dataset, "root", None)
    if root is None or not hasattr(dataset, "loader"):
        raise ValueError(f"{type(dataset).__name__}: not a dataset FidelitySchedule can switch "
                         "(pcrfs.torch.ImageFolder, RecordDataset, or a folder dataset with a "
                         "loader over MNT/scanK)")
    return root


def _attach(dataset, level):
    store = getattr(dataset, "store", None)
    if isinstance(store, (Store, ScheduledStore)):
        base = store if isinstance(store, Store) else store.current()
        scheduled = ScheduledStore(base, level)
        dataset.store = scheduled
        folder = getattr(dataset, "_folder", None)  # RecordDataset reads through its folder
        if folder is not None and hasattr(folder, "store"):
            folder.store = scheduled
        return
    mount, _ = _mount_of(_folder_root(dataset))
    loader = dataset.loader
    if isinstance(loader, ScheduledPathLoader):
        loader = loader.loader
    dataset.loader = ScheduledPathLoader(loader, mount, level)
