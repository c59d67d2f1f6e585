"""Output scaling: a per-tree, per-output intercept and slope fitted on the device.

Regression (:func:`fit_linear_scaling`): the least-squares ``a + b * f`` of each output ``f`` (Keijzer 2003),
whose loss ``Population.fitness(..., scaling=True)`` gathers in the fused kernel pass; this gives the
coefficients of chosen trees for ``predict`` and the exported formulas.

Classification (:func:`fit_logistic_scaling`, batched Newton): each tree's output ``f_k`` (one per class,
or one for two classes) becomes the logit ``a_k + b_k * f_k``, with ``(a, b)`` the L2-regularised
maximum-likelihood fit (softmax or sigmoid cross-entropy) for that tree. The search then looks for the
right *shape* of a decision function, not its offset and magnitude, which trees otherwise build from many
constants.

Every tree is fitted at once: outputs ``[P, D, M]`` give ``2M x 2M`` Newton systems ``[P, 2M, 2M]``, a fixed
number of steps, no host sync. Outputs are z-scored per tree before the fit (so the ridge is scale-free and
the systems well conditioned); the z-scoring is folded back into the returned ``(a, b)``.
"""

from __future__ import annotations

import torch

SCALING_FLAT = 1e-12  # an output with variance <= this x mean^2 is flat (kernels/ops.h, scaled_mse)
SIMPLIFY_TOLERANCE = 1e-12  # of y's variance: what simplifying a linear scaling may add to the MSE
NEWTON_STEPS = 6  # from the prior's intercept, enough for a 1e-5 gap in the loss on evolved trees


def fit_linear_scaling(out: torch.Tensor, y: torch.Tensor, w: torch.Tensor | None = None,
                       simplify: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Intercept ``a [P, M]`` and slope ``b [P, M]`` (float64) of the weighted least-squares fit
    ``y ~ a + b * f`` for every tree's outputs ``out [P, D, M]``; ``y [D, M]``, ``w [D]`` row weights (None:
    all 1). The rule of the kernels' scaled metrics: a flat output (variance <= ``SCALING_FLAT`` x its
    squared mean) gets ``b = 0`` and ``a`` = y's mean; an output with a non-finite value gets NaN.

    ``simplify``: the simplest ``(a, b)`` (:func:`simple_values`: 0 or 1, integers, fractions of small
    denominators, few significant digits, in that order; ``b`` first) whose mean squared error exceeds the
    fit's by at most ``SIMPLIFY_TOLERANCE`` x y's variance: coefficients that only absorb rounding become
    exact (``0.50000000014 * (2 * x)`` reads ``x``) and the formula's values do not move."""
    mf, vf, cov, my, vy, finite = _moments(out, y, w)
    slope = (vf > 0) & (vf > SCALING_FLAT * mf * mf)
    b = torch.where(slope, cov / torch.where(slope, vf, 1.0), 0.0)
    a = my - b * mf
    if simplify:
        a, b = _simplest(a, b, mf, vf, cov, my, vy)
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=a.device)
    return torch.where(finite, a, nan), torch.where(finite, b, nan)


def simple_values(c: torch.Tensor, unit: float) -> torch.Tensor:
    """Candidates ``[..., K]`` for each value of ``c``, simplest first: ``unit``, the nearest integer, the
    nearest fractions with denominators 2..12, ``c`` to 1..6 significant digits, and ``c`` itself."""
    cands = [torch.full_like(c, unit)]
    cands += [torch.round(c * d) / d for d in range(1, 13)]
    mag = torch.floor(torch.log10(c.abs().clamp(min=1e-300))).clamp(-300, 300)
    for digits in range(1, 7):
        q = torch.pow(10.0, digits - 1 - mag)
        cands.append(torch.round(c * q) / q)
    cands.append(c)
    return torch.stack(cands, -1)


def _moments(out: torch.Tensor, y: torch.Tensor, w: torch.Tensor | None):
    """Weighted means, variances and covariance (float64, two passes) of every output ``[P, M]`` and of y
    ``[M]``, and which outputs are finite on every row ``[P, M]`` (the others are read as 0 here)."""
    f, y = out.double(), y.double().reshape(out.shape[1], -1)
    w = torch.ones(f.shape[1], dtype=torch.float64, device=f.device) if w is None else w.double()
    W = w.sum()
    my = (w[:, None] * y).sum(0) / W  # [M]
    vy = (w[:, None] * (y - my) ** 2).sum(0) / W
    finite = torch.isfinite(f).all(1)
    f = torch.where(torch.isfinite(f), f, 0.0)
    mf = torch.einsum("pdm,d->pm", f, w) / W
    fc = f - mf[:, None]
    vf = torch.einsum("pdm,d->pm", fc * fc, w) / W
    cov = torch.einsum("pdm,dm,d->pm", fc, y - my, w) / W
    return mf, vf, cov, my, vy, finite


def _simplest(a, b, mf, vf, cov, my, vy):
    """fit_linear_scaling's simplification, from the moments ``[P, M]`` (y's ``[M]``): the mean squared
    error of ``a + b * f`` is ``vy + (my - a - b mf)^2 - 2 b cov + b^2 vf`` for every candidate pair at
    once. Pairs are ordered by b's candidate, then a's; the first within the limit wins."""
    mf, vf, cov, my, vy = (t[..., None, None] for t in torch.broadcast_tensors(mf, vf, cov, my, vy))

    def mse(ca, cb):
        return vy + (my - ca - cb * mf) ** 2 - 2 * cb * cov + cb * cb * vf

    limit = mse(a[..., None, None], b[..., None, None]) + SIMPLIFY_TOLERANCE * vy
    cb = simple_values(b, 1.0)[..., None]  # [P, M, K, 1]
    ca = simple_values(my - cb * mf, 0.0)[..., 0, :]  # [P, M, K, K]: around the best a of each b
    cb = cb.expand_as(ca)
    ok = (mse(ca, cb) <= limit).flatten(-2)
    n = ok.shape[-1]
    first = torch.where(ok, torch.arange(n, device=a.device), n).min(-1).values
    idx = first.clamp(max=n - 1)[..., None]
    found = first < n
    return (torch.where(found, ca.flatten(-2).gather(-1, idx)[..., 0], a),
            torch.where(found, cb.flatten(-2).gather(-1, idx)[..., 0], b))


def fit_logistic_scaling(out: torch.Tensor, y: torch.Tensor, w: torch.Tensor, ridge: float,
                         steps: int = NEWTON_STEPS, dtype: torch.dtype | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Bias ``a [P, M]`` and scale ``b [P, M]`` minimising the weighted cross-entropy of ``a + b * out``.

    ``out [P, D, M]``: tree outputs (M = 1: sigmoid of class 1, else softmax over M classes); ``y [D]``
    class indices; ``w [D]`` row weights summing to 1; ``ridge``: the L2 penalty ``ridge / 2 * |b|^2`` on
    the scales of the z-scored outputs (the intercepts get 1e-6, which fixes softmax's free shift).
    ``dtype``: of the Newton iterations (float32 by default: the outputs are z-scored, so it is well
    conditioned). Non-finite outputs give ``a = b = 0`` for that output (the caller's loss then marks
    its tree as non-finite).
    """
    P, M = out.shape[0], out.shape[2]
    dtype = torch.float32 if dtype is None else dtype
    out, w = out.to(dtype), w.to(dtype)
    finite = torch.isfinite(out)
    f = torch.where(finite, out, 0.0)
    mean = torch.einsum("pdm,d->pm", f, w)
    sd = torch.einsum("pdm,d->pm", (f - mean[:, None]) ** 2, w).sqrt()
    # an output constant up to rounding carries no signal to scale
    ok = finite.all(1) & (sd > 64 * torch.finfo(dtype).eps * (1 + mean.abs()))
    inv = torch.where(ok, 1.0 / torch.where(ok, sd, 1.0), 0.0)
    z = (f - mean[:, None]) * inv[:, None]  # [P, D, M], 0 where the output is unusable
    onehot = torch.nn.functional.one_hot(y, max(M, 2)).to(dtype)[:, -M:]  # M == 1: the class-1 indicator
    reg = torch.cat([torch.full((M,), 1e-6), torch.full((M,), float(ridge))]).to(out)
    # start at b = 0 and the intercept that is exact there: the log-odds of the (weighted) class prior
    prior = (onehot * w[:, None]).sum(0).clamp(1e-12, 1 - 1e-12)
    a0 = (prior / (1 - prior)).log() if M == 1 else prior.log() - prior.log().mean()
    # (a_1..a_M, b_1..b_M)
    theta = torch.cat([a0, torch.zeros(M, dtype=dtype, device=out.device)]).repeat(P, 1)
    for _ in range(steps):
        a, b = theta[:, :M], theta[:, M:]
        logit = a[:, None] + b[:, None] * z
        p = torch.sigmoid(logit) if M == 1 else torch.softmax(logit, -1)
        r = (p - onehot) * w[:, None]  # [P, D, M]
        grad = torch.cat([r.sum(1), (r * z).sum(1)], -1) + reg * theta
        # the Hessian of the cross-entropy in the logits is diag(p) - p p^T per row (p(1 - p) for a sigmoid);
        # its blocks against (1, z) come from [P, M, M] products, never a [P, D, M, M] tensor
        pw, pz = p * w[:, None], p * z
        haa = torch.diag_embed(pw.sum(1)) - pw.transpose(1, 2) @ p
        hab = torch.diag_embed((pw * z).sum(1)) - pw.transpose(1, 2) @ pz
        hbb = torch.diag_embed((pw * z * z).sum(1)) - (pz * w[:, None]).transpose(1, 2) @ pz
        H = torch.cat([torch.cat([haa, hab], -1), torch.cat([hab.transpose(1, 2), hbb], -1)], 1)
        H = H + torch.diag(reg)
        step = torch.linalg.solve_ex(H, grad[..., None], check_errors=False)[0][..., 0]
        theta = theta - torch.nan_to_num(step, nan=0.0, posinf=0.0, neginf=0.0)
    a, b = theta[:, :M], theta[:, M:]
    # fold the z-scoring back: a + b * (f - mean) / sd = (a - b * mean / sd) + (b / sd) * f
    scale = b * inv
    return a - scale * mean, scale
