"""Choosing the level a training task needs, as the PCR paper does: by the gradient.

    import pcrfs.tune
    batches = pcrfs.tune.store_batches("s3://bucket/imagenet.pcr", root="train",
                                       transform=T.Compose([T.Resize(72), T.CenterCrop(64),
                                                            T.ToTensor()]))
    result = pcrfs.tune.select_scans(model, torch.nn.CrossEntropyLoss(), batches)
    result.scans        # 2: the lowest level whose gradient agrees with level 10's
    result.similarity   # {1: 0.61, 2: 0.83, 3: 0.88, 5: 0.97, 10: 1.0}

``select_scans`` accumulates the gradient of the loss over `num_batches` batches of the same
samples at each level, on the model as it is now, in train mode, and scores each level by the
cosine similarity of its flattened gradient with the reference level's (PCR_Release,
``calculate_scan_gradient_similarity``). The gradient is the judge because it is what the data
does to this model at this point of training; MS-SSIM (``pcr inspect``) is a diagnostic.

It leaves the model as it found it: parameters, buffers (BatchNorm's running statistics),
``.grad``, each module's train/eval mode and torch's random state (every level sees the same
dropout masks, drawn from the state at the call). It never touches an optimizer. Given the
same model, batches and random state it gives the same result. The model may be on any device;
inputs and targets are moved to the device of its first parameter.

``mount_batches`` and ``store_batches`` make `batches(k)` from a mount (``MNT/scanK/ROOT``, a
mount without ``-o scans``) or from a store read without a mount (``pcrfs.Store``): the same
seeded choice of samples, in the same order, with the same random transforms at every level.
"""

import math
import os
import random

import torch

__all__ = ["Selection", "select_scans", "mount_batches", "store_batches", "FixedBatches"]

LEVELS = range(1, 11)


class Selection:
    """What select_scans found: `scans`, the level to read, and `similarity`, {level: cosine of
    its gradient with the reference level's} (NaN where a gradient is zero)."""

    def __init__(self, scans, similarity, threshold, reference):
        self.scans = scans
        self.similarity = similarity
        self.threshold = threshold
        self.reference = reference

    def __repr__(self):
        table = ", ".join(f"{k}: {v:.4f}" for k, v in self.similarity.items())
        return (f"Selection(scans={self.scans}, threshold={self.threshold}, "
                f"reference={self.reference}, similarity={{{table}}})")


def _check_level(name, k):
    if isinstance(k, bool) or not isinstance(k, int) or k not in LEVELS:
        raise ValueError(f"{name}={k!r}: expected an integer in 1..10")


def _to(x, device):
    if torch.is_tensor(x):
        return x.to(device, non_blocking=True)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {key: _to(v, device) for key, v in x.items()}
    return x


def _gradient(model, loss_fn, batches, num_batches, device, params):
    """The gradient of loss_fn summed over the first num_batches batches, flattened (float64),
    with every .grad zeroed first."""
    for p in params:
        p.grad = None
    seen = 0
    it = iter(batches)
    try:
        for inputs, targets in it:
            loss = loss_fn(model(_to(inputs, device)), _to(targets, device))
            loss.backward()
            seen += 1
            if seen >= num_batches:
                break
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    if seen == 0:
        raise ValueError("batches(k) gave no batch")
    flat = [(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
            .to(torch.float64) for p in params]
    return torch.cat(flat), seen


def _cosine(a, b):
    na, nb = torch.linalg.vector_norm(a), torch.linalg.vector_norm(b)
    if na == 0 or nb == 0:
        return math.nan
    return float(torch.dot(a, b) / (na * nb))


def select_scans(model, loss_fn, batches, scans=(1, 2, 3, 5, 10), threshold=0.8, reference=10,
                 num_batches=10):
    """The lowest level of `scans` whose gradient has a cosine similarity of at least
    `threshold` with the reference level's, on `model` as it is now (a Selection: .scans, else
    `reference`; .similarity, {level: cosine}, the reference's own 1.0).

    batches(k) returns an iterable of (inputs, targets) at level k, the same samples in the same
    order for every k; the first `num_batches` are used. loss_fn(model(inputs), targets) is a
    scalar. The reference's gradient is taken twice when it is in `scans`: the second must agree
    with the first (a cosine of 1 up to rounding), else batches(k) is not repeatable and this
    raises ValueError."""
    scans = tuple(scans)
    if not scans:
        raise ValueError("scans: no level given")
    for k in scans:
        _check_level("scans", k)
    _check_level("reference", reference)
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold={threshold!r}: expected a number in 0..1")
    if int(num_batches) < 1:
        raise ValueError(f"num_batches={num_batches!r}: at least 1")
    num_batches = int(num_batches)

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no parameter that requires a gradient")
    device = params[0].device
    saved_state = {name: t.detach().clone() for name, t in model.state_dict(keep_vars=True).items()}
    saved_grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    saved_modes = [(m, m.training) for m in model.modules()]
    cuda = [device] if device.type == "cuda" else []
    rng = torch.get_rng_state()
    cuda_rng = [torch.cuda.get_rng_state(d) for d in cuda]
    py_rng = random.getstate()

    def restore_model():
        with torch.no_grad():
            current = model.state_dict(keep_vars=True)
            for name, value in saved_state.items():
                current[name].copy_(value)

    def gradient_at(k):
        # Every level starts from the same model and the same random state.
        restore_model()
        torch.set_rng_state(rng)
        for d, state in zip(cuda, cuda_rng):
            torch.cuda.set_rng_state(state, d)
        random.setstate(py_rng)
        return _gradient(model, loss_fn, batches(k), num_batches, device, params)

    similarity = {}
    try:
        with torch.random.fork_rng(devices=cuda), torch.enable_grad():
            model.train()
            ref, used = gradient_at(reference)
            for k in scans:
                g, n = gradient_at(k)
                if n != used:
                    raise ValueError(f"batches({k}) gave {n} batches, batches({reference}) {used}")
                similarity[k] = _cosine(ref, g)
    finally:
        random.setstate(py_rng)
        restore_model()
        for p, grad in zip(params, saved_grads):
            p.grad = grad
        for m, training in saved_modes:
            m.training = training
    if reference in similarity:
        if not similarity[reference] >= 1 - 1e-6:
            raise ValueError(f"batches({reference}) is not repeatable: two passes gave "
                             f"gradients of cosine {similarity[reference]:.6f} (the same samples "
                             "in the same order, with a deterministic transform, are needed)")
        similarity[reference] = 1.0
    chosen = next((k for k in sorted(scans) if similarity[k] >= threshold), reference)
    return Selection(chosen, {k: similarity[k] for k in sorted(similarity)}, threshold, reference)


class FixedBatches:
    """batches(k) over datasets made by make_dataset(k): the same `count` samples (a seeded
    choice, or the first ones with seed=None), in the same order, cut into batches of
    batch_size, with torch's random state set from `seed` before each level so random transforms
    draw the same crops at every level (workers too: their seeds come from a generator seeded
    alike). Every level's dataset must list the same samples (its .samples, when it has one).

    The chosen files are read first by `threads` threads (a remote store answers one file per
    round trip; reads release the GIL), then decoded in order: a pcrfs.torch.ImageFolder's from
    those bytes, a folder dataset's through its loader from the page cache they filled."""

    def __init__(self, make_dataset, batch_size=32, num_batches=10, seed=0, num_workers=0,
                 threads=16):
        self.make_dataset = make_dataset
        self.batch_size = int(batch_size)
        self.num_batches = int(num_batches)
        self.seed = seed
        self.num_workers = int(num_workers)
        self.threads = max(1, int(threads))
        self.indices = None
        self.samples = None
        self._datasets = {}

    def dataset(self, k):
        _check_level("k", k)
        if k not in self._datasets:
            self._datasets[k] = self.make_dataset(k)
        return self._datasets[k]

    def _choose(self, dataset):
        n = len(dataset)
        count = min(n, self.batch_size * self.num_batches)
        if self.seed is None:
            return list(range(count))
        return random.Random(f"pcrfs.tune:{self.seed}").sample(range(n), count)

    def __call__(self, k):
        data = self.dataset(k)
        samples = _relative_samples(data)
        if self.indices is None:
            self.indices, self.samples = self._choose(data), samples
        elif samples != self.samples:
            raise ValueError(f"level {k} lists other samples than the first level asked for")
        subset = torch.utils.data.Subset(_preread(data, self.indices, self.threads), self.indices)
        seed = 0 if self.seed is None else hash_seed(self.seed)
        generator = torch.Generator().manual_seed(seed)
        loader = torch.utils.data.DataLoader(subset, batch_size=self.batch_size, shuffle=False,
                                             num_workers=self.num_workers, generator=generator)
        return _seeded(loader, seed)


class _FromBytes(torch.utils.data.Dataset):
    """A pcrfs.torch.ImageFolder's items made from bytes read before."""

    def __init__(self, folder, raw):
        self.folder, self.raw = folder, raw

    def __len__(self):
        return len(self.folder)

    def __getitem__(self, i):
        import io
        f = self.folder
        path, target = f.samples[i]
        sample = f.loader(io.BytesIO(self.raw[i]))
        if f.transform is not None:
            sample = f.transform(sample)
        if f.target_transform is not None:
            target = f.target_transform(target)
        return sample, target


def _preread(data, indices, threads):
    """data, its files at `indices` read by `threads` threads first (see FixedBatches)."""
    from concurrent.futures import ThreadPoolExecutor
    from .store import Store
    samples = getattr(data, "samples", None)
    if samples is None or threads <= 1:
        return data
    store = getattr(data, "store", None)
    if isinstance(store, Store) and hasattr(data, "loader"):
        def read(i):
            return i, store.read(samples[i][0])
    elif hasattr(data, "loader"):
        def read(i):
            with open(samples[i][0], "rb", buffering=0) as f:
                return i, f.readall()
    else:
        return data
    with ThreadPoolExecutor(threads) as pool:
        raw = dict(pool.map(read, indices))
    return _FromBytes(data, raw) if isinstance(store, Store) else data


def hash_seed(seed):
    return random.Random(f"pcrfs.tune.transform:{seed}").getrandbits(63)


def _seeded(loader, seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield from loader


def _relative_samples(data):
    """The dataset's samples with paths relative to its root: what must agree between levels
    (a mount's paths differ by their scanK component)."""
    samples = getattr(data, "samples", None)
    if samples is None:
        return None
    root = getattr(data, "root", "")
    if isinstance(root, str) and os.path.isabs(root):
        return [(os.path.relpath(p, root), t) for p, t in samples]
    return list(samples)


def mount_batches(mount, root="train", transform=None, batch_size=32, num_batches=10, seed=0,
                  num_workers=0, threads=16, **folder_options):
    """batches(k) from torchvision's ImageFolder over MOUNT/scanK/ROOT (a pcrfs mount without
    ``-o scans``, which shows every level), with `transform`; see FixedBatches."""
    import torchvision

    def make(k):
        return torchvision.datasets.ImageFolder(os.path.join(os.fspath(mount), f"scan{k}", root),
                                                transform=transform, **folder_options)
    return FixedBatches(make, batch_size, num_batches, seed, num_workers, threads)


def store_batches(store, root="train", transform=None, batch_size=32, num_batches=10, seed=0,
                  num_workers=0, threads=16, **options):
    """batches(k) from pcrfs.torch.ImageFolder over the store (a pcrfs.Store, whose URL and
    options are reused, or a URL or path opened with `options`) at level k, with `transform`;
    see FixedBatches. Its stores run with prefetch=0 unless the options say otherwise: a few
    hundred scattered files are more than 3% of a folder, and the default would fetch the rest
    of it at every level (tests/bench/train_bench.py: 78 s of a 2 Mbit/s link, not 7)."""
    from .store import Store
    from .torch import ImageFolder
    if isinstance(store, Store):
        if options:
            raise ValueError("options go to the Store when a Store is given: "
                             + ", ".join(sorted(options)))
        url, options = store.url, dict(store.options)
    else:
        url = os.fspath(store)
    options = {"prefetch": 0, **options}

    def make(k):
        return ImageFolder(Store(url, scans=k, **options), root=root, transform=transform)
    return FixedBatches(make, batch_size, num_batches, seed, num_workers, threads)
