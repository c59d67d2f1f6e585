"""Device names in one canonical form, so that "cuda" and "cuda:0" compare equal."""

from __future__ import annotations

import torch


def canonical_device(device: str | torch.device | None) -> torch.device:
    """The device as tensors report it ("cuda" -> "cuda:0"); None is the CPU."""
    return torch.empty(0, device=device if device is not None else "cpu").device
