"""The seed paper's engine, EvoGP, on a Brax control task within a wall-clock budget: the peer that
``bench_policies.py``'s runs are compared with at equal time on the same GPU; prints one JSON document.

EvoGP (github.com/EMI-Group/evogp; not on PyPI: ``pip install --no-build-isolation <checkout>`` builds its
CUDA extension with nvcc, and its problems import scikit-learn) evolves trees with the settings of its
published Brax experiment (``experiment/generate_config.py`` at commit 2147aa5: ``+ - * /`` trees of up to 128
nodes grown two layers deep, constants in [-5, 5], leaf-biased crossover, constant, point and insert
mutations, tournaments of 20) at ``--population`` trees (Table VIII: 5,000), each playing one episode of up to
1,000 steps from a fresh start a generation through its own ``BraxProblem`` (Brax's default pipeline,
generalized; raw observations, tanh actions; the swimmer with gprl's patch for JAX >= 0.10). The loop stops
where one more generation as long as the last would end past ``--budget`` seconds of the process's wall clock
(imports and JAX compilation included), then plays what EvoGP's pipeline keeps, the tree with the best
single-episode training return, on ``--episodes`` fresh full-length episodes of gprl's Brax adapter, from the
seeds ``bench_policies.py``'s replay uses.

    python scripts/bench_evogp_policies.py --task walker2d --budget 540 --out outputs/evogp_walker2d.json

The document: ``settings``, ``device``, ``curve`` (per generation: wall-clock, best and mean training return,
best so far, mean tree size), ``eval`` (the episodes' returns and lengths, mean and standard deviation), the
exported tree as EvoGP prints it and ``wall_s`` (the process's wall clock at the end).
"""

from __future__ import annotations

import time

START = time.time()  # the process's clock, as bench_policies.py measures train.py's

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_policies import EVAL_SEED, EVOGP_TABLE_VIII, TASKS, mean_std

# experiment/generate_config.py of EvoGP's repository at commit 2147aa5 (its Brax runs)
EVOGP_SETTINGS = {
    "descriptor": {"max_tree_len": 128, "max_layer_cnt": 2, "using_funcs": ["+", "-", "*", "/"],
                   "const_range": [-5, 5], "sample_cnt": 100, "layer_leaf_prob": 0},
    "crossover": {"leaf_bias": 0.95},
    "mutation": {"const": {"mutation_rate": 0.8, "mutation_intensity": 0.2},
                 "point": {"mutation_rate": 0.8, "mutation_intensity": 0.2, "modify_output": True},
                 "insert": {"mutation_rate": 0.2}},
    "selection": {"tournament_size": 20, "best_probability": 0.9, "replace": False, "survivor_rate": 0.5,
                  "elite_rate": 0.05},
}


def build(task: str, population: int, length: int, seed: int):
    """EvoGP's problem and pipeline with its Brax experiment's settings."""
    try:
        from evogp.algorithm import (
            CombinedMutation,
            GeneticProgramming,
            InsertMutation,
            LeafBiasedCrossover,
            MultiConstMutation,
            MultiPointMutation,
            TournamentSelection,
        )
        from evogp.pipeline import StandardPipeline
        from evogp.problem import BraxProblem
        from evogp.tree import Forest, GenerateDescriptor
    except ImportError as e:
        raise SystemExit(f"EvoGP is not importable ({e}): install a checkout of github.com/EMI-Group/evogp "
                         "with `pip install --no-build-isolation <checkout>` (needs nvcc and scikit-learn)")
    import torch
    from gprl.envs.brax_env import patch_brax_for_jax

    torch.manual_seed(seed)
    torch.cuda.manual_seed(seed)
    s = EVOGP_SETTINGS
    problem = BraxProblem(task, max_episode_length=length, seed=seed)
    if task == "swimmer":  # Brax 0.14's fluid forces on JAX >= 0.10, as gprl's Brax adapter plays them
        patch_brax_for_jax()
    descriptor = GenerateDescriptor(input_len=problem.problem_dim, output_len=problem.solution_dim,
                                    **s["descriptor"])
    algorithm = GeneticProgramming(
        initial_forest=Forest.random_generate(pop_size=population, descriptor=descriptor),
        crossover=LeafBiasedCrossover(**s["crossover"]),
        mutation=CombinedMutation([MultiConstMutation(descriptor=descriptor, **s["mutation"]["const"]),
                                   MultiPointMutation(descriptor=descriptor, **s["mutation"]["point"]),
                                   InsertMutation(descriptor=descriptor, **s["mutation"]["insert"])]),
        selection=TournamentSelection(**s["selection"]),
        enable_pareto_front=True,
    )
    return StandardPipeline(algorithm, problem, is_show_details=False)


def evolve(pipeline, budget: float) -> list[dict[str, float]]:
    """Generations until one more, as long as the last, would end past ``budget`` s of the process's clock."""
    import torch

    curve: list[dict[str, float]] = []
    last = 0.0
    while time.time() - START + last <= budget:
        t = time.time()
        fitness = pipeline.step()  # evaluates, keeps the best tree so far, breeds the next generation
        torch.cuda.synchronize()
        last = time.time() - t
        finite = fitness[torch.isfinite(fitness)]
        curve.append({"generation": len(curve), "wall_s": time.time() - START, "generation_s": last,
                      "best_return": float(finite.max()), "mean_return": float(finite.mean()),
                      "best_so_far": float(pipeline.best_fitness),
                      "mean_size": float(pipeline.algorithm.forest.batch_subtree_size[:, 0].float().mean())})
        print(f"generation {len(curve) - 1}: best {curve[-1]['best_return']:.1f}, best so far "
              f"{curve[-1]['best_so_far']:.1f}, {curve[-1]['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return curve


def replay(tree, task: str, episodes: int, length: int, seed: int) -> tuple[list[float], list[int]]:
    """EvoGP's exported tree (tanh actions, raw observations) on fresh episodes of gprl's Brax adapter: the
    episodes' returns and lengths in steps."""
    import gprl.envs as genvs

    env = genvs.make(task, backend="brax", num_envs=episodes, seed=seed, episode_length=length,
                     pipeline="generalized")
    try:
        def policy(obs):
            return tree.forward(obs.reshape(-1, env.obs_dim).float().contiguous()).tanh().reshape(
                1, episodes, env.act_dim)

        res = genvs.rollout(env, policy, 1, episodes, max_steps=length, seed=seed)
        return res.returns[0].tolist(), res.lengths[0].tolist()
    finally:
        env.close()


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", choices=TASKS, required=True)
    ap.add_argument("--budget", type=float, default=540.0, help="seconds of the process's wall clock for "
                    "the search (gprl's Brax Walker2d default: gp.time_limit=540)")
    ap.add_argument("--population", type=int, default=5000, help="trees (EvoGP's Table VIII: 5,000)")
    ap.add_argument("--episode-length", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=42, help="EvoGP's experiments' seed")
    ap.add_argument("--episodes", type=int, default=10, help="fresh episodes the exported tree plays")
    ap.add_argument("--eval-seed", type=int, default=EVAL_SEED)
    ap.add_argument("--out", type=Path, help="also write the document here")
    args = ap.parse_args(argv)
    for name in ("budget", "population", "episode_length", "episodes"):
        if not getattr(args, name) > 0:
            ap.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("EvoGP runs on CUDA only: run this on a machine with an NVIDIA GPU")
    pipeline = build(args.task, args.population, args.episode_length, args.seed)
    curve = evolve(pipeline, args.budget)
    search_s = time.time() - START
    returns, lengths = replay(pipeline.best_tree, args.task, args.episodes, args.episode_length,
                              args.eval_seed)
    mean, std = mean_std(returns)
    doc = {
        "peer": "EvoGP", "task": args.task, "device": torch.cuda.get_device_name(),
        "settings": {"population": args.population, "episode_length": args.episode_length, "seed": args.seed,
                     "budget_s": args.budget, **EVOGP_SETTINGS},
        "evogp_table_viii": EVOGP_TABLE_VIII[args.task], "generations": len(curve), "search_s": search_s,
        "best_training_return": float(pipeline.best_fitness), "exported_tree": str(pipeline.best_tree),
        "eval": {"episodes": args.episodes, "seed": args.eval_seed, "returns": returns, "lengths": lengths,
                 "mean": mean, "std": std, "finite": all(math.isfinite(r) for r in returns)},
        "curve": curve, "wall_s": time.time() - START,
    }
    text = json.dumps(doc, indent=1)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return doc


if __name__ == "__main__":
    main()
