"""Accuracy of sin, cos and tan as gprl's kernels compute them, in float32 ulps against NumPy's float64.

Single-node trees f(x0) are evaluated by the forward op on millions of float32 inputs: uniform, log-uniform
magnitudes, the floats nearest to multiples of pi/2 (where the argument reduction cancels) with their
neighbours, and beyond the CPU rows' fast range (|x| > 2^20, where libm takes over). Prints one JSON document.

    python scripts/dev/trig_accuracy.py --out results/trig_accuracy_cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout's gprl

from gprl import Population
from gprl.backend.ops import ops


def inputs(n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    f32 = np.float32
    sign = lambda m: rng.choice([-1.0, 1.0], m)
    k = rng.integers(-667_000, 667_000, n // 4).astype(np.float64)  # |k pi/2| <= 2^20
    near, up, down = [(k * (np.pi / 2)).astype(f32)] * 3
    cols = [near]
    for _ in range(4):  # the nearest float and 4 neighbours on each side
        up, down = np.nextafter(up, f32(np.inf)), np.nextafter(down, f32(-np.inf))
        cols += [up, down]
    return {
        "uniform_pi": rng.uniform(-np.pi, np.pi, n).astype(f32),
        "uniform_2^20": rng.uniform(-(2.0**20), 2.0**20, n).astype(f32),
        "log_magnitude_1e-30_2^20": (np.exp(rng.uniform(np.log(1e-30), np.log(2.0**20), n))
                                     * sign(n)).astype(f32),
        "near_k_pi_2": np.concatenate(cols),
        "beyond_2^20": (np.exp(rng.uniform(np.log(2.0**20), np.log(3.4e38), n // 4))
                        * sign(n // 4)).astype(f32),
    }


def evaluate(name: str, x: np.ndarray, device: str) -> np.ndarray:
    pop = Population.from_expressions([f"{name}(x0)"], n_in=1).to(device)
    out = []
    for s in range(0, len(x), 1 << 21):
        xt = torch.from_numpy(x[s:s + (1 << 21)]).to(device)[None]
        out.append(ops.forward(*pop.tensors(), xt, 1, pop.max_stack())[0, :, 0].cpu().numpy())
    return np.concatenate(out)


def ulp_stats(y: np.ndarray, x: np.ndarray, name: str) -> dict:
    exact = getattr(np, name)(x.astype(np.float64))
    _, e = np.frexp(exact)
    err = np.abs(y.astype(np.float64) - exact) / np.ldexp(1.0, np.maximum(e - 24, -149))
    correctly_rounded = y == exact.astype(np.float32)
    return {"n": int(x.size), "max_ulp": round(float(err.max()), 4), "mean_ulp": round(float(err.mean()), 4),
            "not_correctly_rounded": float(f"{1 - correctly_rounded.mean():.3g}")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--n", type=int, default=4_000_000, help="inputs per uniform set")
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    sets = inputs(args.n, args.seed)
    doc = {"benchmark": "trig_accuracy", "device": args.device,
           "machine": platform.processor() or platform.machine(),
           "reference": "numpy float64; ulp = float32 spacing at the exact value", "results": {}}
    for set_name, x in sets.items():
        for f in ("sin", "cos", "tan"):
            doc["results"][f"{set_name}/{f}"] = ulp_stats(evaluate(f, x, args.device), x, f)
    special = np.array([np.nan, np.inf, -np.inf], np.float32)
    doc["non_finite_inputs_give_nan"] = all(bool(np.isnan(evaluate(f, special, args.device)).all())
                                            for f in ("sin", "cos", "tan"))
    text = json.dumps(doc, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
