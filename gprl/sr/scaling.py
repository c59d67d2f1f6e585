"""Logistic output scaling: a per-tree, per-output bias and scale fitted on the device (batched Newton).

Linear scaling (Keijzer 2003) for classification: each tree's output ``f_k`` (one per class, or one for
two classes) becomes the logit ``a_k + b_k * f_k``, with ``(a, b)`` the L2-regularised maximum-likelihood fit
(softmax or sigmoid cross-entropy) for that tree. The search then looks for the right *shape* of a decision
function, not its offset and magnitude, which trees otherwise build from many constants.

Every tree is fitted at once: outputs ``[P, D, M]`` give ``2M x 2M`` Newton systems ``[P, 2M, 2M]``, a fixed
number of steps, no host sync. Outputs are z-scored per tree before the fit (so the ridge is scale-free and
the systems well conditioned); the z-scoring is folded back into the returned ``(a, b)``.
"""

from __future__ import annotations

import torch

NEWTON_STEPS = 6  # from the prior's intercept, enough for a 1e-5 gap in the loss on evolved trees


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
