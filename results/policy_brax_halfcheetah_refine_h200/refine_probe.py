"""How much the refinement (``gprl.rl.refine``) adds to given Brax policies (``--env``, HalfCheetah unless
given; ``--backend mujoco``: native MuJoCo on the CPU instead): each policy.txt's formulas (raw observation
units, tanh actions) become one tree; it plays 2 * ``--pairs`` * ``--episodes`` (or ``--validation-episodes``)
fresh 1000-step episodes (Brax: the generalized pipeline), then each ``--targets`` entry (target:sigma,
stepping by sigma or ``--step``) tunes it for ``--seconds`` (``--pairs`` antithetic perturbations of
``--episodes`` episodes each, ``--horizon`` steps long, the best ``--top`` stepping) and the result plays the
same fresh episodes; a target ``a:s1+b:s2`` tunes ``a``, then ``b`` on its result, half the seconds each;
``joint`` tunes the constants, the observation scaling and a linear feedback at once (each as its own target
scales it).
``python refine_probe.py [--seconds S] [--targets feedback:0.01 constants:0.02] policy.txt...`` prints a JSON
line per policy and target. The feedback perturbs each observation's weight in units of 1 / its spread on
those episodes (the tree plays raw observations), as a tree on normalised observations would."""

import argparse
import json
import math
import time

import sympy as sp
import torch

from gprl import envs
from gprl.core import functions as F
from gprl.core.population import Population
from gprl.rl.policy import ActionMap, ObsNormalizer, evaluate_policies
from gprl.rl.refine import (
    RefineSettings,
    feedback_scale,
    fold,
    linear_policy,
    refine,
    tree_numbers,
    with_numbers,
)

VALIDATION_SEED = 20261202


def tree_of(path: str, names: list[str]) -> Population:
    """The formulas' arguments of tanh as one tree over x0, x1, ... (the observations ``names``); a constant
    action c becomes atanh(c) (±1, which tanh reaches only past the 4 printed digits, becomes ±5: the
    constants' range)."""
    syms = sp.symbols(names)
    xs = sp.symbols([f"x{i}" for i in range(len(names))])
    local = {**dict(zip(names, syms)), "gt": F.gt, "lt": F.lt, "Min": sp.Min, "Max": sp.Max}
    outs = []
    with open(path) as f:  # one "<action> = <formula>" line per action, in the actions' order
        lines = [line.split(" = ", 1) for line in f.read().splitlines() if " = " in line and line[0] != "#"]
    for _, text in lines:
        e = sp.sympify(text, locals=local)
        if e.func == sp.tanh:
            e = e.args[0]
        elif (-e).func == sp.tanh:  # -tanh(u) = tanh(-u), as sympy prints an odd tanh
            e = -(-e).args[0]
        elif e.is_number:
            v = float(e)
            e = sp.Float(math.copysign(5.0, v) if abs(v) >= 0.9999 else math.atanh(v))
        else:
            raise ValueError(f"{path}: expected tanh(...) or a constant, got {text}")
        outs.append(e.subs(dict(zip(syms, xs))))
    return Population.from_expressions([outs], n_in=len(names))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("policies", nargs="+")
    ap.add_argument("--env", default="halfcheetah")
    ap.add_argument("--backend", default="brax", choices=["brax", "mujoco"],
                    help="brax (generalized pipeline, the GPU where there is one) or mujoco (native, CPU)")
    ap.add_argument("--episodes", type=int, default=1, help="episodes a perturbation")
    ap.add_argument("--seconds", type=float, default=80.0)
    ap.add_argument("--targets", nargs="+", default=["feedback:0.01", "constants:0.02"],
                    help="TARGET:SIGMA, each stepping by its sigma")
    ap.add_argument("--pairs", type=int, default=128)
    ap.add_argument("--top", type=int, default=64)
    ap.add_argument("--step", type=float, default=None, help="the step (default: each target's sigma)")
    ap.add_argument("--horizon", type=int, default=1000, help="steps of the perturbations' episodes")
    ap.add_argument("--reward-shift", type=float, default=0.0,
                    help="subtracted from every live step's reward in the perturbations' scores")
    ap.add_argument("--validation-episodes", type=int, default=None,
                    help="fresh 1000-step episodes before and after (default: 2 * pairs * episodes)")
    args = ap.parse_args()
    brax = args.backend == "brax"
    dev = torch.device("cuda" if brax and torch.cuda.is_available() else "cpu")
    E = args.episodes
    n = 2 * args.pairs * E  # one batch of environments: the perturbations' and the validation's
    kwargs = {"pipeline": "generalized"} if brax else {}
    env = envs.make(args.env, backend=args.backend, num_envs=n, device=dev, episode_length=1000, **kwargs)
    V = args.validation_episodes or n
    venv = env if V == n else envs.make(args.env, backend=args.backend, num_envs=V, device=dev,
                                        episode_length=1000, **kwargs)
    amap = ActionMap.for_env(env, "tanh")
    zero, one = torch.zeros(env.obs_dim, device=dev), torch.ones(env.obs_dim, device=dev)

    def validate(tree: Population, mean: torch.Tensor, std: torch.Tensor
                 ) -> tuple[float, float, torch.Tensor]:
        stats = ObsNormalizer(env.obs_dim, dev)
        ev = evaluate_policies(tree.to(dev), venv, amap, mean.to(dev), std.to(dev), V, 1000,
                               seed=VALIDATION_SEED, stats=stats)
        stats.freeze()
        r = ev.episode_returns[0].double().cpu()
        return float(r.mean()), float(r.std() / math.sqrt(len(r))), stats.std.cpu()

    def tune(tree: Population, mean: torch.Tensor, std: torch.Tensor, spread: torch.Tensor, target: str,
             sigma: float, seconds: float):
        """``target`` tuned on ``tree`` (normalised by ``mean``, ``std``): the refined tree, its
        normalisation and the refinement."""
        settings = RefineSettings(pairs=args.pairs, top=args.top, sigma=sigma, step=args.step or sigma,
                                  target=target, episodes=E)
        n_in, n_out = env.obs_dim, env.act_dim
        feedback = feedback_scale(spread / std.cpu()).expand(n_out, -1)  # each weight in units of its spread
        if target == "constants":
            start, scale = tree_numbers(tree, mean, std)
        elif target == "joint":
            numbers, scale = tree_numbers(tree, mean, std)
            M = len(numbers)
            start = torch.cat([numbers, torch.zeros(n_out * (n_in + 1), dtype=torch.float64)])
            scale = torch.cat([scale, feedback.reshape(-1)])
        else:
            start, scale = torch.zeros(n_out, n_in + 1, dtype=torch.float64), feedback

        def play(params: torch.Tensor, it: int) -> torch.Tensor:
            seed = 7919 * (it + 1)
            p = params.to(dev)
            if target == "constants":
                trees, means, stds = with_numbers(tree, p)
                ev = evaluate_policies(trees, env, amap, means, stds, E, args.horizon, seed=seed)
                return ev.returns - args.reward_shift * ev.lengths
            if target == "joint":
                trees, means, stds = with_numbers(tree, p[:, :M])
                w = p[:, M:].reshape(-1, n_out, n_in + 1).float()
                w_t, bias = w[:, :, :n_in].transpose(1, 2).contiguous(), w[:, None, :, n_in].contiguous()

                def policy(obs: torch.Tensor) -> torch.Tensor:  # [K, E, n_in]: each copy its own numbers
                    x = (obs - means[:, None]) / stds[:, None]
                    return amap(torch.baddbmm(bias, x, w_t).add_(trees.forward(x, check_finite=False)))

                res = envs.rollout(env, policy, len(p), E, max_steps=args.horizon, seed=seed)
                return res.mean_return - args.reward_shift * res.mean_length
            policy = linear_policy(tree, p, mean, std, amap)
            res = envs.rollout(env, policy, len(p), E, max_steps=args.horizon, seed=seed)
            return res.mean_return - args.reward_shift * res.mean_length

        done = refine(start, 2 * args.pairs, settings, seconds, 1, play, scale=scale)
        if target in ("constants", "joint"):
            numbers = done.params[:M] if target == "joint" else done.params
            refined, m, sd = with_numbers(tree.to("cpu"), numbers[None])
            if target == "joint":  # the feedback acts on the tuned normalisation's x: fold it in there
                refined = fold(refined, done.params[M:].reshape(n_out, n_in + 1))
            return refined.to(dev), m[0].to(dev, torch.float32), sd[0].to(dev, torch.float32), done
        return fold(tree.to("cpu"), done.params).to(dev), mean, std, done

    for path in args.policies:
        start_tree = tree_of(path, env.obs_names).to(dev)
        t0 = time.perf_counter()
        before, se, spread = validate(start_tree, zero, one)
        print(json.dumps({"policy": path, "target": None, "validation": round(before, 2), "se": round(se, 2),
                          "episodes": V, "s": round(time.perf_counter() - t0, 1)}), flush=True)
        for spec in args.targets:
            steps = [(part.split(":")[0], float(part.split(":")[1])) for part in spec.split("+")]
            tree, mean, std, runs = start_tree, zero, one, []
            for target, sigma in steps:
                seconds = args.seconds / len(steps)
                tree, mean, std, done = tune(tree, mean, std, spread, target, sigma, seconds)
                hist = [h["mean_score"] for h in done.history]
                runs.append({"target": target, "sigma": sigma, "iterations": done.iterations,
                             "refine_s": round(done.seconds, 1),
                             "perturbations_mean": [round(h, 2) for h in hist[:: max(1, len(hist) // 8)]]
                             + ([round(hist[-1], 2)] if hist else [])})
            after, se_after, _ = validate(tree, mean, std)
            print(json.dumps({"policy": path, "target": spec, "step": args.step, "pairs": args.pairs,
                              "top": args.top, "episodes": E, "horizon": args.horizon,
                              "reward_shift": args.reward_shift, "validation": round(after, 2),
                              "se": round(se_after, 2), "gain": round(after - before, 2), "runs": runs}),
                  flush=True)

if __name__ == "__main__":
    main()
