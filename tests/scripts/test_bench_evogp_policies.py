"""scripts/bench_evogp_policies.py without EvoGP (CUDA only): the replay plays a tree on the same fresh Brax
episodes, with the same returns, as gprl's own replay of an exported tree; bad arguments and a machine without
CUDA are refused with messages; bench_policies.py --merge draws a peer's document beside gprl's records."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("jax", reason="needs the brax extra: pip install -e '.[brax]'")
pytest.importorskip("brax", reason="needs the brax extra: pip install -e '.[brax]'")
pytest.importorskip("matplotlib", reason="needs matplotlib (the train extra)")

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_replay_plays_the_episodes_gprl_replays():
    """A tree with EvoGP's ``forward(x [B, n_in]) -> [B, n_out]`` (here a gprl tree on raw observations)
    scores on the script's replay what gprl's replay (tanh actions, identity normalisation) scores on the same
    seeds."""
    import gprl.envs as genvs

    from gprl.core.population import Population
    from gprl.rl.policy import ActionMap, evaluate_policies

    peer = load("bench_evogp_policies")
    env = genvs.make("hopper", backend="brax", num_envs=3, seed=7, episode_length=30, pipeline="generalized",
                     device="cpu")
    x = [f"x{i}" for i in range(env.obs_dim)]
    formulas = [f"{x[5]} - 0.5*{x[1]}", f"0.3 - {x[2]}*{x[6]}", f"{x[0]}*{x[7]} + 0.2"]
    tree = Population.from_expressions([formulas], n_in=env.obs_dim)
    try:
        ours = evaluate_policies(tree, env, ActionMap.for_env(env, "tanh"), torch.zeros(env.obs_dim),
                                 torch.ones(env.obs_dim), 3, 30, seed=peer.EVAL_SEED)
    finally:
        env.close()
    returns, lengths = peer.replay(tree, "hopper", 3, 30, peer.EVAL_SEED)
    assert len(returns) == 3 and all(math.isfinite(r) for r in returns)
    assert len(set(returns)) == 3  # three different starts
    assert returns == pytest.approx(ours.episode_returns[0].tolist(), rel=1e-6)
    assert all(1 <= n <= 30 for n in lengths) and sum(lengths) / 3 == pytest.approx(float(ours.lengths[0]))


def test_arguments_and_a_machine_without_cuda(monkeypatch, capsys):
    peer = load("bench_evogp_policies")
    for bad in (["--task", "walker2d", "--budget", "0"], ["--task", "walker2d", "--episodes", "0"],
                ["--task", "ant"]):
        with pytest.raises(SystemExit):
            peer.main(bad)
        assert "--" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="EvoGP runs on CUDA only"):
        peer.main(["--task", "walker2d"])


def test_merge_draws_a_peer_document(tmp_path):
    bench = load("bench_policies")
    curve = [{"generation": g, "wall_s": 70.0 + 10 * g, "generation_s": 10.0, "best_return": 100.0 * g,
              "mean_return": 10.0 * g, "best_so_far": 100.0 * g, "mean_size": 20.0} for g in range(3)]
    doc = {"peer": "EvoGP", "task": "walker2d", "device": "NVIDIA H200",
           "settings": {"population": 5000, "episode_length": 1000, "seed": 42, "budget_s": 540.0},
           "evogp_table_viii": 2365.0, "generations": 3, "search_s": 100.0, "best_training_return": 200.0,
           "exported_tree": "[x0]", "curve": curve, "wall_s": 120.0,
           "eval": {"episodes": 2, "seed": bench.EVAL_SEED, "returns": [150.0, 50.0], "mean": 100.0,
                    "std": 50.0, "finite": True}}
    path = tmp_path / "evogp_walker2d.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "merged"
    bench.main(["--out", str(out), "--merge", str(path)])
    merged = json.loads((out / "bench_policies_brax.json").read_text())
    [rec] = merged["records"]
    assert (rec["task"], rec["seed"], rec["peer"], rec["population_size"]) == ("walker2d", 42, "EvoGP", 5000)
    assert rec["curve"] == curve and rec["eval"]["returns"] == [150.0, 50.0] and rec["wall_s"] == 120.0
    assert rec["label"].startswith("EvoGP (5,000 trees), seed 42, 540 s") and rec["source"] == str(path)
    assert (out / "bench_policies_brax.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
