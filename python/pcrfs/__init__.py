"""pcrfs from Python. For now: telling a mount the order files will be read in (pcrfs.hint)."""

from .hint import HintedSampler, Hinter, mount_root

__all__ = ["Hinter", "HintedSampler", "mount_root"]
