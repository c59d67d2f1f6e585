"""Fitness of a population on a supervised dataset: regression losses and classification losses.

An objective is built once per dataset (validated, laid out on the device) and then called once per
generation with a :class:`Population`; it returns the loss of every tree, ``[P]`` float32 on the device,
lower is better (``GeneticProgramming.step``'s convention), with no host sync.

* :class:`RegressionObjective` uses the fused ``Population.fitness`` kernel (no ``[P, D]`` predictions);
  with ``scaling=True`` each output's loss is that of its least-squares ``a + b * f``, gathered in the same
  pass.
* :class:`ClassificationObjective` needs the outputs themselves: ``Population.forward`` in chunks of trees
  (``[chunk, D, n_out]``), then softmax cross-entropy (sigmoid for a single output) or the error rate.
  With ``scaling=True`` each tree's outputs first get their own fitted bias and scale
  (``gprl.sr.scaling``): the loss is that of the best logistic calibration of the tree.
"""

from __future__ import annotations

import numpy as np
import torch

from gprl.core.dataset import Dataset, check_float32_range
from gprl.core.population import METRICS, Population
from gprl.sr.scaling import fit_linear_scaling, fit_logistic_scaling

CLASSIFICATION_METRICS = ("cross_entropy", "accuracy")


class RegressionObjective:
    """MSE / MAE / RMSE of every tree on ``X [D, n_in]``, ``y [D]`` or ``[D, n_out]`` (mean over outputs),
    optionally weighted per row.

    ``scaling=True`` (``mse`` / ``rmse``): the loss of each output after its least-squares linear scaling
    ``a + b * f`` (Keijzer 2003), so the search looks for the shape of the function and the fit supplies
    its offset and magnitude; ``coefficients`` gives ``(a, b)`` for export."""

    def __init__(self, X, y, weight=None, metric: str = "mse", device=None, scaling: bool = False,
                 chunk_elements: int = 1 << 24):
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {list(METRICS)} for regression, got {metric!r}")
        if scaling and metric == "mae":
            raise ValueError("scaling=True fits a + b * f by least squares: use metric 'mse' or 'rmse', "
                             "or scaling=False for 'mae'")
        weight = None if weight is None else _tensor(weight, "weight")
        self.data = Dataset(_tensor(X, "X"), _tensor(y, "y"), weight, device=device)
        self.metric, self.scaling, self.chunk_elements = metric, bool(scaling), int(chunk_elements)

    @property
    def n_in(self) -> int:
        return self.data.n_in

    @property
    def n_out(self) -> int:
        return self.data.n_out

    def __call__(self, population: Population,
                 coefficients: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Loss ``[P]``; ``coefficients`` (intercept, slope ``[P, n_out]``, e.g. fitted on other rows) are
        applied to the outputs instead of the fit of ``scaling``."""
        if coefficients is None:
            return population.fitness(self.data, metric=self.metric, scaling=self.scaling)
        a, b = _check_coefficients(coefficients, len(population), self.n_out, self.data.device)
        y, w = self.data.y.double().reshape(self.data.n_rows, -1), self.data.weight
        losses = []
        for i, out in _output_chunks(population, self.data, self.n_out, self.chunk_elements):
            e = a[i:i + len(out), None] + b[i:i + len(out), None] * out.double() - y  # [chunk, D, M]
            e = e.abs() if self.metric == "mae" else e * e
            m = e.mean(1) if w is None else torch.einsum("pdm,d->pm", e, w.double()) / w.double().sum()
            losses.append((m.sqrt() if self.metric == "rmse" else m).mean(1))
        loss = torch.cat(losses).float() if losses else torch.zeros(0, device=self.data.device)
        return torch.nan_to_num(loss, nan=float("inf"))

    def flat_loss(self) -> float:
        """The loss of the target's mean alone on these rows (the weighted mean of each output)."""
        y, w = self.data.y.double().reshape(self.data.n_rows, -1), self.data.weight
        w = torch.ones(len(y), dtype=torch.float64, device=y.device) if w is None else w.double()
        e = y - (w[:, None] * y).sum(0) / w.sum()
        e = e.abs() if self.metric == "mae" else e * e
        m = (w[:, None] * e).sum(0) / w.sum()
        return float((m.sqrt() if self.metric == "rmse" else m).mean())

    def coefficients(self, population: Population, simplify: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """Intercept and slope ``[P, n_out]`` (float64) of every tree's outputs: the least-squares fit with
        ``scaling`` (``simplify``: its simplest form within rounding, ``fit_linear_scaling``), else 0 and
        1."""
        P, dev = len(population), self.data.device
        zeros = torch.zeros(P, self.n_out, dtype=torch.float64, device=dev)
        if not self.scaling:
            return zeros, torch.ones_like(zeros)
        fits = [fit_linear_scaling(out, self.data.y, self.data.weight, simplify)
                for _, out in _output_chunks(population, self.data, self.n_out, self.chunk_elements)]
        if not fits:
            return zeros, zeros
        return torch.cat([a for a, _ in fits]), torch.cat([b for _, b in fits])

    def gauss_newton_terms(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradient ``[P, D, M]`` and Gauss–Newton Hessian ``[P, D, M, M]`` (float64, diagonal in the outputs)
        of the loss with respect to every tree's outputs ``out [P, D, M]``, row by row (for
        ``gprl.evolve.constants``). The loss is the kernel's: with row weights ``w`` (1 without) and
        ``W = sum w``, output ``k``'s ``m_k = sum_r w_r e_rk^2 / W`` (``mae``: ``|e_rk|``), averaged over the
        ``M`` outputs (``rmse``: the mean of ``sqrt(m_k)``).

        * ``mse``: exact, ``g = 2 w e / (M W)`` and ``h = 2 w / (M W)``;
        * ``rmse``: the chain rule at the current point, ``g = w e / (M W sqrt(m_k))``, and the Gauss–Newton
          part of the Hessian, ``h = w / (M W sqrt(m_k))`` (the negative semidefinite term
          ``-grad m grad m^T / (4 m^1.5)`` couples the rows and is dropped): for one output the step is mse's;
        * ``mae``: the exact gradient ``w sign(e) / (M W)`` with the IRLS curvature
          ``w / (M W max(|e|, eps))`` (``eps`` = 1e-4 x the output's weighted mean ``|e|``): the step is
          an iteratively reweighted least-squares step towards the least-absolute-deviations fit.
          ``gprl.evolve.constants.optimize_constants`` keeps a step only where the true loss decreases.

        Non-finite outputs give zero terms; so does an output already fitted exactly (``m_k = 0``).
        With ``scaling`` the outputs pass through their least-squares ``a + b * out`` (held fixed: at the
        fitted optimum that is still the exact gradient), so both terms carry ``b``'s factors."""
        y = self.data.y.double().reshape(1, self.data.n_rows, -1)  # [1, D, M]
        w = self.data.weight
        w = torch.ones(y.shape[1], dtype=torch.float64, device=y.device) if w is None else w.double()
        W, M = w.sum(), y.shape[2]
        finite = torch.isfinite(out)
        z = out.double()
        if self.scaling:
            a, slope = fit_linear_scaling(out, self.data.y, self.data.weight)
            z = a[:, None] + slope[:, None] * z
            finite = finite & torch.isfinite(z)
        e = torch.where(finite, z - y, 0.0)
        w = w[None, :, None] / (M * W)  # [1, D, 1]: each row's share of the loss
        if self.metric == "mse":
            g, h = 2.0 * w * e, (2.0 * w).expand_as(e)
        elif self.metric == "rmse":
            root = ((w * M) * e * e).sum(1, keepdim=True).sqrt()  # sqrt(m_k) [P, 1, M]
            scale = torch.where(root > 0, 1.0 / root, 0.0)
            g, h = w * e * scale, (w * scale).expand_as(e)
        else:  # mae
            a = e.abs()
            eps = 1e-4 * ((w * M) * a).sum(1, keepdim=True)
            g = w * torch.sign(e)
            h = torch.where(eps > 0, w / torch.maximum(a, eps).clamp(min=torch.finfo(torch.float64).tiny),
                            0.0)
        if self.scaling:  # d z / d out = b
            g, h = g * slope[:, None], h * slope[:, None] ** 2
        g, h = torch.where(finite, g, 0.0), torch.where(finite, h, 0.0)
        return g, torch.diag_embed(h)


class ClassificationObjective:
    """Cross-entropy (or error rate) of every tree on ``X [D, n_in]`` and integer classes ``y [D]`` in
    ``0..n_classes-1``. Two classes use one output (its sigmoid is P(class 1)); more use one output per class
    (softmax).

    ``scaling=True``: the outputs ``f`` of every tree are read as logits ``a + b * f`` with ``(a, b)`` fitted
    per tree and output by L2-regularised cross-entropy (``ridge``, default ``1 / n_rows``: scikit-learn's
    ``LogisticRegression(C=1)`` on the z-scored output); ``coefficients`` gives them for export."""

    def __init__(self, X, y, n_classes: int, weight=None, metric: str = "cross_entropy", device=None,
                 chunk_elements: int = 1 << 24, scaling: bool = False, ridge: float | None = None):
        if metric not in CLASSIFICATION_METRICS:
            raise ValueError(f"metric must be one of {list(CLASSIFICATION_METRICS)} for classification, "
                             f"got {metric!r}")
        if n_classes < 2:
            raise ValueError(f"n_classes must be >= 2, got {n_classes}")
        codes = torch.as_tensor(np.asarray(y), dtype=torch.long)
        if codes.dim() != 1 or bool((codes < 0).any()) or bool((codes >= n_classes).any()):
            raise ValueError(f"y must be [D] class indices in 0..{n_classes - 1}")
        # Dataset validates X and the weights once (finite, shapes) and places them on the device
        weight = None if weight is None else _tensor(weight, "weight")
        self.data = Dataset(_tensor(X, "X"), codes.float(), weight, device=device)
        self.y = codes.to(self.data.device)
        self.n_classes, self.metric, self.chunk_elements = int(n_classes), metric, int(chunk_elements)
        self.scaling = bool(scaling)
        self.ridge = 1.0 / len(codes) if ridge is None else float(ridge)
        if not (self.ridge > 0 and np.isfinite(self.ridge)):
            raise ValueError(f"ridge must be a finite number > 0, got {ridge!r}")
        w = self.data.weight
        self.w = (torch.ones(len(self.y), device=self.data.device) if w is None else w) / (
            len(self.y) if w is None else w.sum())

    @property
    def n_in(self) -> int:
        return self.data.n_in

    @property
    def n_out(self) -> int:
        return 1 if self.n_classes == 2 else self.n_classes

    def loss_from_outputs(self, out: torch.Tensor) -> torch.Tensor:
        """Loss per tree from outputs ``[P, D, n_out]``."""
        y = self.y
        if self.metric == "accuracy":
            pred = (out[..., 0] > 0).long() if self.n_out == 1 else out.argmax(-1)
            return 1.0 - ((pred == y).float() * self.w).sum(-1)
        if self.n_out == 1:
            per_row = torch.nn.functional.binary_cross_entropy_with_logits(
                out[..., 0], y.to(out.dtype).expand(out.shape[0], -1), reduction="none")
        else:
            per_row = (torch.logsumexp(out, -1)
                       - out.gather(-1, y.view(1, -1, 1).expand(out.shape[0], -1, 1))[..., 0])
        return (per_row * self.w).sum(-1)

    def _chunks(self, population: Population):
        return _output_chunks(population, self.data, self.n_out, self.chunk_elements)

    def flat_loss(self) -> float:
        """0: the model choice's rounding floor (``select_model``) applies to regression losses only."""
        return 0.0

    def coefficients(self, population: Population) -> tuple[torch.Tensor, torch.Tensor]:
        """Bias and scale ``[P, n_out]`` (float64) of every tree's outputs: the fitted ones with ``scaling``,
        else 0 and 1."""
        if not self.scaling:
            P, dev = len(population), self.data.device
            return (torch.zeros(P, self.n_out, dtype=torch.float64, device=dev),
                    torch.ones(P, self.n_out, dtype=torch.float64, device=dev))
        fits = [fit_logistic_scaling(out, self.y, self.w, self.ridge) for _, out in self._chunks(population)]
        if not fits:
            empty = torch.zeros(0, self.n_out, dtype=torch.float64, device=self.data.device)
            return empty, empty
        return torch.cat([a for a, _ in fits]), torch.cat([b for _, b in fits])

    def gauss_newton_terms(self, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradient ``[P, D, M]`` and Hessian ``[P, D, M, M]`` (float64) of the cross-entropy with respect to
        every tree's outputs ``out [P, D, M]``, row by row (for ``gprl.evolve.constants``: the Gauss–Newton
        matrix of a tree's constants is ``J^T H J``). With ``scaling`` the outputs pass through their fitted
        bias and scale, held fixed: at the fitted optimum that is still the exact gradient. For
        ``metric="accuracy"`` these are the cross-entropy's, its smooth surrogate."""
        z = out.double()
        if self.scaling:
            a, b = fit_logistic_scaling(out, self.y, self.w, self.ridge)
            z = a[:, None] + b[:, None] * z
        w = self.w.double()[None, :, None]
        if self.n_out == 1:
            p = torch.sigmoid(z)
            g = (p - self.y.double()[None, :, None]) * w
            h = (p * (1 - p) * w)[..., None]
        else:
            p = torch.softmax(z, -1)
            onehot = torch.nn.functional.one_hot(self.y, self.n_out).double()[None]
            g = (p - onehot) * w
            h = (torch.diag_embed(p) - p[..., :, None] * p[..., None, :]) * w[..., None]
        if self.scaling:  # d z / d out = b
            g = g * b[:, None]
            h = h * b[:, None, :, None] * b[:, None, None, :]
        finite = torch.isfinite(z).all(-1, keepdim=True)
        return torch.where(finite, g, 0.0), torch.where(finite[..., None], h, 0.0)

    def _loss(self, out: torch.Tensor, coef: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        if coef is None and self.scaling:
            coef = fit_logistic_scaling(out, self.y, self.w, self.ridge)
        if coef is not None:
            # float64 logits, as the exported formula a + b * f; a non-finite f stays non-finite (0 * inf)
            out = coef[0][:, None] + coef[1][:, None] * out.double()
        return self.loss_from_outputs(out)

    def __call__(self, population: Population,
                 coefficients: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Loss ``[P]``; ``coefficients`` (bias, scale ``[P, n_out]``, e.g. fitted on other rows) replace the
        fit of ``scaling``."""
        if coefficients is not None:
            coefficients = _check_coefficients(coefficients, len(population), self.n_out, self.data.device)
        sl = (lambda i, n: None if coefficients is None else tuple(c[i:i + n] for c in coefficients))
        losses = [self._loss(out, sl(i, len(out))) for i, out in self._chunks(population)]
        loss = torch.cat(losses).float() if losses else torch.zeros(0, device=self.data.device)
        return torch.nan_to_num(loss, nan=float("inf"))


def _output_chunks(population: Population, data: Dataset, n_out: int, chunk_elements: int):
    """(first tree, outputs ``[chunk, D, n_out]``) a chunk of trees at a time (bounds the memory)."""
    step = max(1, chunk_elements // max(1, data.n_rows * n_out))
    for i in range(0, len(population), step):
        yield i, population[i:i + step].forward(data.X, check_finite=False)  # a checked Dataset


def _check_coefficients(coefficients, P: int, n_out: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(intercept, slope) as float64 ``[P, n_out]`` tensors on ``device``."""
    a, b = (torch.as_tensor(c, dtype=torch.float64, device=device) for c in coefficients)
    if a.shape != (P, n_out) or b.shape != (P, n_out):
        raise ValueError(f"coefficients must be (bias, scale) of shape [{P}, {n_out}]")
    return a, b


def _tensor(a, name: str) -> torch.Tensor:
    """float arrays to float32 tensors (validated in Dataset, except for values past float32's range: the
    cast here would turn them into inf)."""
    a = a if isinstance(a, torch.Tensor) else np.asarray(a)
    check_float32_range(a, name)
    if isinstance(a, torch.Tensor):
        return a.float()
    return torch.as_tensor(np.ascontiguousarray(a, dtype=np.float32))
