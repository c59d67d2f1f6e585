"""A regression dataset prepared once for the evaluation kernels.

Validation (dtype, device, finite values) and the column-major copies the kernels read (one input column
contiguous, so neighbouring threads read neighbouring rows) happen here once, not on every fitness call.
"""

from __future__ import annotations

import numpy as np
import torch

from gprl.core.devices import canonical_device


def check_float32_range(x: torch.Tensor | np.ndarray, name: str, fix: str | None = None) -> None:
    """A ValueError naming ``name`` (and ``fix``, default: rescale it) where ``x`` holds finite values that
    a float32 cast would turn into inf."""
    if isinstance(x, np.ndarray):
        if x.dtype != np.float64 or x.size == 0:
            return
        big = float(np.where(np.isfinite(x), np.abs(x), 0.0).max())
    else:
        if x.dtype != torch.float64 or x.numel() == 0:
            return
        big = float(torch.where(torch.isfinite(x), x.abs(), 0.0).max())
    top = float(torch.finfo(torch.float32).max)
    if big > top:
        raise ValueError(f"{name} has values past float32's range (|{name}| up to {big:.3g} > {top:.3g}), "
                         f"the precision the kernels compute in; {fix or f'rescale {name}'}")


def as_float_tensor(x, name: str, device: torch.device, check_finite: bool = True) -> torch.Tensor:
    """Validates user data and returns it as a contiguous float32 tensor on `device`; `check_finite` also
    rejects NaN, inf and values past float32's range (on a GPU that check waits for the device: hot loops
    skip it)."""
    if isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.floating):
            raise ValueError(f"{name} must have a floating dtype, got {x.dtype}; "
                             "convert it with .astype(float)")
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must have a floating dtype, got {x.dtype}; convert it with {name}.float()")
    if x.device != device:
        raise ValueError(f"{name} is on {x.device} but the population is on {device}; move it with "
                         f"{name}.to('{device}') or the population with .to('{x.device}')")
    if check_finite:
        check_float32_range(x, name)
    x = x.to(torch.float32).contiguous()
    if check_finite and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or inf values; clean or impute them first")
    return x


class Dataset:
    """Inputs ``X[D, n_in]``, targets ``y[D]`` or ``[D, n_out]`` and optional row weights ``[D]``."""

    def __init__(self, X, y, weight=None, device: str | torch.device | None = None):
        if device is None:
            device = X.device if isinstance(X, torch.Tensor) else torch.device("cpu")
        device = canonical_device(device)
        if isinstance(X, torch.Tensor) and X.device != device:
            X = X.to(device)
        if isinstance(y, torch.Tensor) and y.device != device:
            y = y.to(device)
        X = as_float_tensor(X, "X", device)
        y = as_float_tensor(y, "y", device)
        if X.dim() != 2:
            raise ValueError(f"X must be [D, n_in], got shape {tuple(X.shape)}")
        if X.shape[0] == 0:
            raise ValueError("X has no rows; a dataset needs at least one")
        if y.dim() == 1:
            y = y[:, None]
        if y.dim() != 2 or y.shape[0] != X.shape[0]:
            raise ValueError(f"y must be [D] or [D, n_out] with D={X.shape[0]} rows like X, "
                             f"got {tuple(y.shape)}")
        if weight is not None:
            if isinstance(weight, torch.Tensor) and weight.device != device:
                weight = weight.to(device)
            weight = as_float_tensor(weight, "weight", device)
            if weight.shape != (X.shape[0],) or bool((weight < 0).any()) or not bool(weight.sum() > 0):
                raise ValueError(f"weight must be [D] with D={X.shape[0]}, >= 0 and not all 0")
        self.X, self.y, self.weight = X, y, weight
        self.Xt = X.t().contiguous()  # [n_in, D]
        self.yt = y.t().contiguous()  # [n_out, D]

    @property
    def n_rows(self) -> int:
        return self.X.shape[0]

    @property
    def n_in(self) -> int:
        return self.X.shape[1]

    @property
    def n_out(self) -> int:
        return self.y.shape[1]

    @property
    def device(self) -> torch.device:
        return self.X.device

    def to(self, device) -> Dataset:
        return Dataset(self.X.to(device), self.y.to(device),
                       None if self.weight is None else self.weight.to(device))
