"""An independent reference evaluator written from the documented semantics (gprl/core/functions.py and the
encoding in gprl/core/population.py). It walks trees in plain Python over NumPy rows and shares no code with
the library, so agreement is evidence, not tautology."""

from __future__ import annotations

import numpy as np

EPS = 1e-6
BOUND = 3.4028234663852886e38
PAD, VAR, CONST, FUNC, OUTPUT_FLAG = 0, 1, 2, 3, 4


def _functions(xp_round):
    r = xp_round

    def clamp(v):
        return np.clip(v, -BOUND, BOUND)

    def safe(fn):
        def wrapped(*a):
            with np.errstate(all="ignore"):
                return r(clamp(fn(*a)))
        return wrapped

    return {
        0: (2, safe(lambda a, b: a + b)),
        1: (2, safe(lambda a, b: a - b)),
        2: (2, safe(lambda a, b: a * b)),
        3: (2, safe(lambda a, b: np.where(np.abs(b) < EPS, 1.0, a / np.where(np.abs(b) < EPS, 1.0, b)))),
        4: (1, safe(np.sin)),
        5: (1, safe(np.cos)),
        6: (1, safe(np.tan)),
        7: (1, safe(np.exp)),
        8: (1, safe(lambda a: np.where(np.abs(a) < EPS, 0.0, np.log(np.maximum(np.abs(a), EPS))))),
        9: (1, safe(lambda a: np.sqrt(np.abs(a)))),
        10: (1, safe(np.abs)),
        11: (1, safe(lambda a: -a)),
        12: (1, safe(lambda a: np.where(np.abs(a) < EPS, 1.0, 1.0 / np.where(np.abs(a) < EPS, 1.0, a)))),
        13: (2, safe(lambda a, b: np.power(np.abs(a), b))),
        14: (2, safe(np.maximum)),
        15: (2, safe(np.minimum)),
        16: (1, safe(np.tanh)),
        17: (1, safe(lambda a: 1.0 / (1.0 + np.exp(-a)))),
        18: (2, safe(lambda a, b: np.where(a < b, 1.0, -1.0))),
        19: (2, safe(lambda a, b: np.where(a > b, 1.0, -1.0))),
        20: (3, safe(lambda a, b, c: np.where(a > 0, b, c))),
    }


# float32 mode rounds every node's result to float32 (what the kernels compute up to libm ulps);
# float64 mode keeps full precision; the perturbed modes nudge every node's result by +-4 float32 ulps (the
# largest error CUDA documents for its float functions), which reveals outputs whose value hinges on rounding
# (ill-conditioned: libm differences decide them).
FUNCS32 = _functions(lambda v: np.asarray(v, np.float32).astype(np.float64))
FUNCS64 = _functions(lambda v: np.asarray(v, np.float64))


def _perturbed(seed):
    """Every node's result nudged by +-4 ulps with random signs per node and row. (Uniform signs would miss
    chains such as inv(exp(x)), where consecutive nudges cancel.)"""
    rng = np.random.default_rng(seed)

    def nudge(v):
        v = np.asarray(v, np.float64)
        return v * (1.0 + rng.choice([-1.0, 1.0], size=v.shape) * 2.0**-21)
    return _functions(nudge)


def eval_tree(kind, code, out, value, size, X, n_out, precision=32):
    """kind..size: 1-D arrays of one tree; X: [B, n_in] float. Returns [B, n_out] float64."""
    funcs = {32: FUNCS32, 64: FUNCS64}.get(precision) or _perturbed(precision)
    X = np.asarray(X, np.float64)
    B = X.shape[0]
    outputs = np.zeros((B, n_out))
    length = int(size[0])
    stack = []
    for i in range(length - 1, -1, -1):
        k = int(kind[i]) & 3
        if k == VAR:
            stack.append(X[:, int(code[i])])
        elif k == CONST:
            stack.append(np.full(B, float(value[i])))
        else:
            ar, fn = funcs[int(code[i])]
            args = [stack.pop() for _ in range(ar)]
            v = fn(*args)
            if int(kind[i]) & OUTPUT_FLAG:
                outputs[:, int(out[i])] += v
                stack.append(args[-1])
            else:
                stack.append(v)
    if length and not int(kind[0]) & OUTPUT_FLAG:
        outputs[:, 0] += stack[0]
    return outputs


def eval_population(pop, X, precision=32):
    """Reference outputs [P, B, n_out]; X is [B, n_in] (shared) or [P, B, n_in] (per tree)."""
    t = [a.cpu().numpy() for a in pop.tensors()]
    X = X.cpu().numpy() if hasattr(X, "cpu") else np.asarray(X)
    res = []
    for p in range(len(pop)):
        xp = X if X.ndim == 2 else X[p]
        res.append(eval_tree(*(a[p] for a in t), xp, pop.n_out, precision))
    return np.stack(res) if res else np.zeros((0, X.shape[-2], pop.n_out))


def loss(pred, y, metric, weight=None):
    """pred, y: [D, n_out]; the documented fitness (mean over outputs)."""
    e = pred - y
    per = np.abs(e) if metric == "mae" else e * e
    w = np.ones(len(y)) if weight is None else np.asarray(weight, np.float64)
    m = (per * w[:, None]).sum(0) / w.sum()
    return float(np.mean(np.sqrt(m) if metric == "rmse" else m))


def scaled_loss(pred, y, metric, weight=None):
    """pred, y: [D, n_out]; the loss after each output's least-squares a + b * f (NumPy lstsq on the
    sqrt-weighted design [1, f]); a flat output (its spread at float32 rounding of its mean) is fitted by the
    mean alone, a non-finite one gives NaN."""
    w = np.ones(len(y)) if weight is None else np.asarray(weight, np.float64)
    sw = np.sqrt(w)
    per = []
    for k in range(y.shape[1]):
        f, t = pred[:, k].astype(np.float64), y[:, k].astype(np.float64)
        if not np.isfinite(f).all():
            return float("nan")
        mf = np.average(f, weights=w)
        sd = np.sqrt(np.average((f - mf) ** 2, weights=w))
        # the same column space as [1, f], well conditioned for any size of f
        design = np.stack([np.ones_like(f), (f - mf) / (sd if sd > 0 else 1.0)], 1)
        if sd * sd <= 1e-12 * mf * mf:
            design = design[:, :1]
        coef = np.linalg.lstsq(design * sw[:, None], t * sw, rcond=None)[0]
        per.append(np.average((design @ coef - t) ** 2, weights=w))
    per = np.array(per)
    return float(np.mean(np.sqrt(per) if metric == "rmse" else per))


def compare(actual, pop, X, rtol=1e-5, atol=1e-6):
    """Checks kernel outputs against the float32 reference where the result is well conditioned (float64
    and six runs with every node nudged by 4 ulps agree to rtol/4). Returns the fraction left out."""
    actual = actual.cpu().numpy().astype(np.float64)
    ref32 = eval_population(pop, X, 32)
    ref64 = eval_population(pop, X, 64)
    assert not np.isnan(ref32).any()
    assert np.array_equal(np.isnan(actual), np.isnan(ref32)), "NaN where the reference has none"
    scale = np.maximum(np.abs(ref32), np.abs(ref64))
    conditioned = np.abs(ref32 - ref64) <= rtol / 4 * scale + atol
    for seed in (101, 202, 303, 404, 505, 606):
        conditioned &= np.abs(eval_population(pop, X, seed) - ref64) <= rtol / 4 * scale + atol
    bad = conditioned & ~(np.abs(actual - ref32) <= rtol * np.maximum(scale, np.abs(actual)) + atol)
    if bad.any():
        idx = np.argwhere(bad)[0]
        raise AssertionError(
            f"{bad.sum()} mismatches; first at {tuple(idx)}: kernel {actual[tuple(idx)]!r} vs reference "
            f"{ref32[tuple(idx)]!r}")
    return 1.0 - conditioned.mean()


def random_inputs(rng, shape):
    return rng.uniform(-3, 3, size=shape).astype(np.float32)


