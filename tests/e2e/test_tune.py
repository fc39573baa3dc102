#!/usr/bin/python3
"""Choosing the level by the gradient (issue 42): pcrfs.tune.select_scans and
pcrfs.torch.FidelitySchedule on a small real store, through pcrfs.Store and through a mount.

- the reference level scores 1.0 against itself, for real: its gradient is taken twice and the
  two agree; batches that are not repeatable are refused with one line;
- the similarity through a mount (MNT/scanK) equals the similarity through pcrfs.Store for the
  same samples, float for float;
- the model's weights, buffers, .grad, each module's mode, the optimizer's state and torch's
  random state are as they were after tuning: training goes on exactly as without it;
- a schedule's switch gives the new level's bytes (as `pcr extract` writes them) from the next
  epoch on, for pcrfs.torch.ImageFolder and RecordDataset and for torchvision's ImageFolder over
  a mount, with DataLoader(persistent_workers=True) under fork and spawn.

The package is imported from the build tree (PCRFS_PYTHONPATH, as for test_python.py). Needs
torch and torchvision (Debian's python3-torch, python3-torchvision)."""

import hashlib
import math
import os
import sys
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
PYTHONPATH = os.environ.get("PCRFS_PYTHONPATH", os.path.join(TOP, "build", "python"))
sys.path.insert(0, PYTHONPATH)

from pcrtest import (PCR, Indexed, Mount, TempDirTest, pcr_extract, photo, run,  # noqa: E402
                     save_jpeg)

import torch  # noqa: E402
import torchvision.transforms as T  # noqa: E402

import pcrfs  # noqa: E402
import pcrfs.tune  # noqa: E402
from pcrfs.torch import FidelitySchedule, ImageFolder, RecordDataset  # noqa: E402

CLASSES = {"ant": 6, "bee": 5, "cow": 5}
LEVELS = (1, 3, 10)
warnings.filterwarnings("ignore", message="This DataLoader will create")
TRANSFORM = T.Compose([T.RandomResizedCrop(24, scale=(0.5, 1.0)), T.ToTensor()])


def sha_loader(f):
    """The sample's bytes, hashed (a file object from a Store or a path on a mount)."""
    if isinstance(f, (str, bytes, os.PathLike)):
        with open(f, "rb") as g:
            return hashlib.sha256(g.read()).hexdigest()
    return hashlib.sha256(f.read()).hexdigest()


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 6, 3, stride=2), torch.nn.BatchNorm2d(6), torch.nn.ReLU(),
        torch.nn.Dropout(0.3), torch.nn.AdaptiveAvgPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(24, len(CLASSES)))


class TuneTest(TempDirTest):
    @classmethod
    def setUpClass(cls):
        cls.top = TempDirTest()
        cls.top.setUp()
        cls.addClassCleanup(cls.top.tearDown)
        src = cls.top.path("src")
        seed = 0
        for name, n in CLASSES.items():
            for i in range(n):
                seed += 1
                save_jpeg(photo(48 + 8 * (i % 3), 40 + 8 * (i % 2), seed),
                          os.path.join(src, "train", name, f"{i:02d}.jpg"), quality=92)
        cls.store = cls.top.path("store")
        run([PCR, "build", src, cls.store, "--quiet", "--images-per-record", "4",
             "--quality-sample", "0"])
        cls.extracted = {k: pcr_extract(cls.store, k) for k in LEVELS}

    def batches(self, **kw):
        return pcrfs.tune.store_batches(self.store, transform=TRANSFORM, batch_size=4,
                                        num_batches=3, seed=5, **kw)

    def test_reference_scores_one_and_levels_differ(self):
        model = tiny_model()
        loss = torch.nn.CrossEntropyLoss()
        got = pcrfs.tune.select_scans(model, loss, self.batches(), scans=(1, 3, 10),
                                      threshold=0.9, num_batches=3)
        self.assertEqual(sorted(got.similarity), [1, 3, 10])
        self.assertEqual(got.similarity[10], 1.0)
        for k in (1, 3):
            self.assertLess(got.similarity[k], 1 - 1e-6, got)  # other bytes, another gradient
            self.assertGreater(got.similarity[k], -1.0)
        passing = [k for k in (1, 3) if got.similarity[k] >= 0.9]
        self.assertEqual(got.scans, passing[0] if passing else 10, got)
        # Deterministic: the same call gives the same numbers.
        again = pcrfs.tune.select_scans(model, loss, self.batches(), scans=(1, 3, 10),
                                        threshold=0.9, num_batches=3)
        self.assertEqual(again.similarity, got.similarity)
        # The threshold decides: at 0 the lowest level, above 1 the reference.
        self.assertEqual(pcrfs.tune.select_scans(model, loss, self.batches(), scans=(1, 3, 10),
                                                 threshold=0.0, num_batches=3).scans,
                         1 if got.similarity[1] >= 0 else (3 if got.similarity[3] >= 0 else 10))
        self.assertEqual(pcrfs.tune.select_scans(model, loss, self.batches(), scans=(1, 3),
                                                 threshold=1.0, num_batches=3).scans, 10)

    def test_unrepeatable_batches_are_refused(self):
        """Batches that differ from call to call cannot be compared: one clear line."""
        data = ImageFolder(self.store, scans=10, transform=TRANSFORM)
        calls = []

        def rotating(k):
            calls.append(k)
            first = 4 * len(calls)
            return torch.utils.data.DataLoader(
                torch.utils.data.Subset(data, range(first, first + 4)), batch_size=4)
        with self.assertRaises(ValueError) as e:
            pcrfs.tune.select_scans(tiny_model(), torch.nn.CrossEntropyLoss(), rotating,
                                    scans=(10,), num_batches=1)
        self.assertIn("batches(10) is not repeatable", str(e.exception))
        self.assertEqual(calls, [10, 10])
        with self.assertRaises(ValueError) as e:
            pcrfs.tune.select_scans(tiny_model(), torch.nn.CrossEntropyLoss(), rotating,
                                    scans=(0, 10))
        self.assertEqual(str(e.exception), "scans=0: expected an integer in 1..10")

    def test_mount_equals_store(self):
        mnt = self.top.path("mnt-tune")
        with Mount(self.store, mnt):
            over_mount = pcrfs.tune.mount_batches(mnt, transform=TRANSFORM, batch_size=4,
                                                  num_batches=3, seed=5)
            by_mount = pcrfs.tune.select_scans(tiny_model(), torch.nn.CrossEntropyLoss(),
                                               over_mount, scans=(1, 3, 10), num_batches=3)
        by_store = pcrfs.tune.select_scans(tiny_model(), torch.nn.CrossEntropyLoss(),
                                           self.batches(), scans=(1, 3, 10), num_batches=3)
        self.assertEqual(by_mount.similarity, by_store.similarity)
        self.assertEqual(by_mount.scans, by_store.scans)
        # Both read the same samples: the same seeded choice of the same list.
        by_store_batches = self.batches()
        next(iter(by_store_batches(10)))
        self.assertEqual(over_mount.indices, by_store_batches.indices)
        self.assertEqual([(os.path.join("train", p), t) for p, t in over_mount.samples],
                         by_store_batches.samples)

    def test_model_state_is_unchanged(self):
        data = ImageFolder(self.store, scans=10, transform=TRANSFORM)
        batches = list(torch.utils.data.DataLoader(data, batch_size=4, shuffle=True,
                                                   generator=torch.Generator().manual_seed(1)))
        loss_fn = torch.nn.CrossEntropyLoss()

        def step(model, opt, x, y):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()

        def midway():
            """A model 2 steps in, in a mixed mode (dropout on, batch norm frozen), with a
            .grad not yet stepped, and torch's random state at a known point."""
            model = tiny_model(1)
            opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
            for x, y in batches[:2]:
                step(model, opt, x, y)
            model.eval()
            model[3].train()
            loss_fn(model(batches[2][0]), batches[2][1]).backward()
            torch.manual_seed(123)
            return model, opt

        model, opt = midway()

        def snapshot():
            return ({k: v.clone() for k, v in model.state_dict().items()},
                    [p.grad.clone() for p in model.parameters()],
                    [m.training for m in model.modules()],
                    {k: {n: t.clone() if torch.is_tensor(t) else t for n, t in s.items()}
                     for k, s in opt.state_dict()["state"].items()},
                    torch.get_rng_state())
        before = snapshot()
        got = pcrfs.tune.select_scans(model, loss_fn, self.batches(), scans=(1, 10),
                                      num_batches=3)
        self.assertEqual(got.similarity[10], 1.0)
        after = snapshot()
        for name in before[0]:
            self.assertTrue(torch.equal(before[0][name], after[0][name]), name)
        for a, b in zip(before[1], after[1]):
            self.assertTrue(torch.equal(a, b))
        self.assertEqual(before[2], after[2])
        self.assertEqual(before[3].keys(), after[3].keys())
        for k in before[3]:
            for n in before[3][k]:
                self.assertTrue(torch.equal(before[3][k][n], after[3][k][n]), (k, n))
        self.assertTrue(torch.equal(before[4], after[4]))
        # And training goes on exactly as it does without tuning.
        model.train()
        step(model, opt, *batches[3])
        twin, twin_opt = midway()
        twin.train()
        step(twin, twin_opt, *batches[3])
        for a, b in zip(model.parameters(), twin.parameters()):
            self.assertTrue(torch.equal(a, b))

    def want(self, samples, k, root=""):
        """{index: sha256 of the sample's bytes at level k} from pcr extract."""
        return {i: hashlib.sha256(self.extracted[k][os.path.relpath(p, root) if root else p])
                .hexdigest() for i, (p, _) in enumerate(samples)}

    def epochs_of(self, data, schedule, context, epochs, root=""):
        """Runs `epochs` epochs of a DataLoader with persistent workers over data (Indexed),
        set_epoch before each; asserts each epoch's bytes are its level's."""
        loader = torch.utils.data.DataLoader(Indexed(data), batch_size=3, shuffle=True,
                                             num_workers=2, persistent_workers=True,
                                             multiprocessing_context=context)
        for epoch in range(epochs):
            k = schedule.set_epoch(epoch)
            got = {}
            for indices, hashes in loader:
                got.update(zip(indices.tolist(), hashes))
            self.assertEqual(got, self.want(data.samples, k, root), f"epoch {epoch}, level {k}")

    def test_schedule_switches_image_folder_persistent_fork(self):
        data = ImageFolder(self.store, scans=10, loader=sha_loader)
        data[0]  # the parent's store is open when the workers start
        schedule = FidelitySchedule(data, levels={0: 10, 1: 1, 2: 3})
        self.epochs_of(data, schedule, "fork", 4)
        self.assertEqual([(e, k) for e, k, _ in schedule.history], [(0, 10), (1, 1), (2, 3)])
        self.assertEqual(data.store.scans, 3)

    def test_schedule_switches_image_folder_persistent_spawn(self):
        data = ImageFolder(self.store, scans=3, loader=sha_loader)
        schedule = FidelitySchedule(data, levels=lambda epoch: (3, 10, 1)[epoch])
        self.epochs_of(data, schedule, "spawn", 3)

    def test_schedule_switches_a_mounts_prefix_persistent(self):
        import torchvision
        mnt = self.top.path("mnt-schedule")
        with Mount(self.store, mnt):
            data = torchvision.datasets.ImageFolder(os.path.join(mnt, "scan1", "train"),
                                                    loader=sha_loader)
            schedule = FidelitySchedule.ramp(data, 0, 2, low=1, high=10, steps=(1, 3, 10))
            self.assertEqual([schedule.level_for(e) for e in range(4)], [1, 10, 10, 10])
            schedule = FidelitySchedule(data, levels={0: 1, 1: 3, 2: 10})
            self.epochs_of(data, schedule, "fork", 3, root=os.path.join(mnt, "scan1"))

    def test_schedule_switches_record_dataset_persistent(self):
        data = RecordDataset(self.store, scans=1, loader=sha_loader, shuffle_buffer=3)
        schedule = FidelitySchedule(data, levels={0: 1, 1: 10})
        loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=2,
                                             persistent_workers=True,
                                             multiprocessing_context="fork")
        for epoch in range(3):
            k = schedule.set_epoch(epoch)
            want = sorted(self.want(data.samples, k).values())
            self.assertEqual(sorted(h for h, _ in loader), want, f"epoch {epoch}")

    def test_tuned_schedule_tunes_every_n_epochs(self):
        data = ImageFolder(self.store, scans=10, transform=TRANSFORM)
        model = tiny_model()
        schedule = FidelitySchedule(data, every=2, model=model,
                                    loss_fn=torch.nn.CrossEntropyLoss(), batches=self.batches(),
                                    scans=(1, 3, 10), threshold=0.5, num_batches=3)
        levels = [schedule.set_epoch(e) for e in range(5)]
        tuned = [(e, sel) for e, _, sel in schedule.history if sel is not None]
        self.assertEqual([e for e, _ in tuned], [0, 2, 4])
        for e, sel in tuned:
            self.assertEqual(levels[e], sel.scans)
            self.assertEqual(levels[e + 1] if e + 1 < 5 else sel.scans, sel.scans)
        self.assertEqual(data.store.scans, levels[-1])
        self.assertFalse(math.isnan(tuned[0][1].similarity[1]))

    def test_schedule_refuses_what_it_cannot_switch(self):
        data = ImageFolder(self.store, scans=10)
        with self.assertRaises(ValueError) as e:
            FidelitySchedule(data, levels={0: 11})
        self.assertEqual(str(e.exception), "levels[0] 11: expected an integer in 1..10")
        with self.assertRaises(ValueError):
            FidelitySchedule(data)
        import torchvision
        plain = torchvision.datasets.ImageFolder(os.path.join(self.top.path("src"), "train"))
        with self.assertRaises(ValueError) as e:
            FidelitySchedule(plain, levels={0: 1})
        self.assertIn("no scanK component", str(e.exception))


if __name__ == "__main__":
    unittest.main()
