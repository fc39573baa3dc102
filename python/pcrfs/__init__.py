"""pcrfs from Python.

- ``pcrfs.Store``: a store read without a mount (local, s3://, gs://, az://, http(s)://), with
  the mount's options as keyword arguments (pcrfs.store; needs the extension pcrfs._pcrfs).
- ``pcrfs.torch``: ImageFolder over a Store, and HintedSampler for mounts (imports torch).
- ``pcrfs.hint``: telling a mount the order files will be read in (pure Python).

``import pcrfs`` imports neither the extension nor torch: the hint client works without them.
"""

from .hint import HintedSampler, Hinter, mount_root

__all__ = ["Hinter", "HintedSampler", "mount_root", "Store", "StoreFile"]


def __getattr__(name):
    # The extension is loaded when a Store is first asked for, not by `import pcrfs`.
    if name in ("Store", "StoreFile"):
        from . import store
        return getattr(store, name)
    raise AttributeError(f"module 'pcrfs' has no attribute {name!r}")
