"""Seeds of the counter-based (Philox) kernels: one 62-bit key per call, derived from the user's seed."""

from __future__ import annotations

import numpy as np
import torch

_MASK64 = (1 << 64) - 1


def mix_seed(*values: int) -> int:
    """splitmix64 over the values: independent 62-bit seeds per (run, generation, purpose)."""
    h = 0x9E3779B97F4A7C15
    for v in values:
        h = (h ^ (v & _MASK64)) * 0xBF58476D1CE4E5B9 & _MASK64
        h = (h ^ (h >> 31)) * 0x94D049BB133111EB & _MASK64
        h ^= h >> 29
    return h & ((1 << 62) - 1)


def seed_from(seed: int | torch.Generator | None) -> int:
    """A 62-bit kernel seed: an int as given, else drawn from a torch Generator (default: torch's global)."""
    if isinstance(seed, bool) or (seed is not None
                                  and not isinstance(seed, (int, np.integer, torch.Generator))):
        raise TypeError(f"seed must be an int, a torch.Generator or None, got {type(seed).__name__}")
    if isinstance(seed, (int, np.integer)):
        return int(seed) & ((1 << 62) - 1)
    return int(torch.randint(0, 2**62, (1,), generator=seed).item())
