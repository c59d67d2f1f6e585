"""env.train_kwargs: the training environments (and racing's finalists) take them over env.kwargs; validation
and the export play env.kwargs alone."""

import json

import pytest
import torch

import gprl
from gprl import envs
from gprl.rl.policy import evaluate_policies
from gprl.train.checkpoint import population_from_state
from gprl.train.tasks.policy import PolicyTask

pytest.importorskip("mujoco")

P, LENGTH, WIDE = 16, 40, {"reset_noise_scale": 0.3}


def play(task: PolicyTask, pop, episodes: int, seed: int, mean=None, std=None, **kwargs) -> torch.Tensor:
    env = envs.make("hopper", backend="mujoco", num_envs=len(pop) * episodes, seed=0, episode_length=LENGTH,
                    nthread=1, **kwargs)
    try:
        mean = torch.zeros(task.n_in) if mean is None else mean
        std = torch.ones(task.n_in) if std is None else std
        return evaluate_policies(pop, env, task.action_map, mean, std, episodes, LENGTH, seed=seed,
                                 common_starts=True).returns
    finally:
        env.close()


def test_training_plays_the_train_kwargs_and_validation_the_environments_own(tmp_path):
    cfg = {"name": "hopper", "backend": "mujoco", "episodes": 1, "episode_length": LENGTH,
           "kwargs": {"nthread": 1},
           "train_kwargs": WIDE}
    task = PolicyTask(cfg, pop_size=P, seed=3, device="cpu", validation_episodes=3)
    try:
        pop = gprl.Population.random(P, task.n_in, task.n_out, max_len=32, seed=5)
        fitness, _ = task.evaluate(pop, generation=0)
        seed = task._seed(0, 7)
        wide, own = play(task, pop, 1, seed, **WIDE), play(task, pop, 1, seed)
        torch.testing.assert_close(fitness.double(), wide.float().double())
        assert not torch.allclose(wide, own)  # the wider starts change the returns
        _, rows = task.validate()
        h = task.candidates()[0]
        tree = population_from_state(h["tree"], "cpu")
        again = play(task, tree, 3, rows[0]["validation_seed"], h["mean"], h["std"])
        assert rows[0]["validation_return"] == pytest.approx(float(again.mean()), rel=1e-5)
        task.finish(pop, fitness, str(tmp_path))
        meta = json.loads((tmp_path / "policy.json").read_text())["meta"]
        assert meta["env_kwargs"] == {"nthread": 1}  # replays play the environment's own starts
    finally:
        task.close()
