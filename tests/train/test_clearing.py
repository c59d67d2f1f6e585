"""Clearing (gp.clearing_radius): policies compared by their actions on states the generation visited."""

import json

import pytest
import torch

import gprl
from gprl import envs
from gprl.rl.policy import evaluate_policies
from gprl.train.tasks.policy import PolicyTask
from tests.train.helpers import assert_same_final_population, kill_and_resume, metrics, run_train, train

pytest.importorskip("mujoco")

P, LENGTH = 12, 40


def make_env(num_envs: int):
    return envs.make("halfcheetah", backend="mujoco", num_envs=num_envs, seed=0, episode_length=LENGTH,
                     nthread=1)


def test_probe_states_are_observations_the_rollout_visited():
    pop = gprl.Population.random(4, 17, 6, max_len=16, seed=2)
    env = make_env(8)
    try:
        zeros, ones = torch.zeros(17), torch.ones(17)
        ev = evaluate_policies(pop, env, gprl.rl.policy.ActionMap.for_env(env), zeros, ones, 2, LENGTH,
                               seed=5, probe=10)
        seen = []

        def policy(obs):
            seen.append(obs.reshape(-1, 17).clone())
            return torch.tanh(pop.forward(obs))

        envs.rollout(env, policy, 4, 2, LENGTH, seed=5)
    finally:
        env.close()
    visited = torch.cat(seen)
    assert ev.probe_states.shape == (10, 17)  # halfcheetah never ends early: every probe is live
    for state in ev.probe_states:
        assert (visited == state).all(1).any()


def test_task_behaviour_is_the_trees_actions_on_its_probe_states():
    cfg = {"name": "halfcheetah", "backend": "mujoco", "episode_length": LENGTH,
           "racing": {"horizon": 0.25, "finalists": 0.25}, "kwargs": {"nthread": 1}}
    task = PolicyTask(cfg, pop_size=P, seed=3, device="cpu", validation_episodes=2, probe=16)
    try:
        pop = gprl.Population.random(P, task.n_in, task.n_out, max_len=32, seed=5)
        assert task.behaviour(pop) is None  # nothing visited yet
        task.evaluate(pop, generation=0)
        states, mean, std = task.probe_states
        assert len(states) == 32  # 16 of the short episodes, 16 of the finalists' whole ones
        expect = torch.tanh(pop.forward((states - mean) / std).double()).float()  # actions in [-1, 1]
        torch.testing.assert_close(task.behaviour(pop), expect.reshape(P, -1))
    finally:
        task.close()


def test_a_policy_run_with_clearing_and_an_sr_run_refused(tmp_path):
    """Trees near a better one rank after every niche's best: the later generations differ from the plain
    run's."""
    train(tmp_path, "plain", "gp.generations=3")
    train(tmp_path, "clear", "gp.generations=3", "gp.clearing_radius=0.3")
    rows = [[json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
            for run in ("plain", "clear")]
    assert rows[0][0]["mean_return"] == rows[1][0]["mean_return"]  # the same first generation
    assert rows[0][2]["mean_return"] != rows[1][2]["mean_return"]
    res = run_train(tmp_path, "sr", "task=sr", "dataset=koza_quartic", "gp.generations=1", "progress=false",
                    "gp.clearing_radius=0.3", check=False)
    assert res.returncode != 0 and "gp.clearing_radius compares policies' actions" in res.stderr


def test_killed_and_resumed_run_with_clearing_is_bit_identical(tmp_path):
    """A checkpoint holds a population about to be evaluated, whose rollouts give the states clearing
    compares on: nothing of them needs saving."""
    gens = ["gp.generations=5", "checkpoint_every=1", "wandb.mode=disabled", "gp.clearing_radius=0.3"]
    full, resumed = kill_and_resume(tmp_path, train, gens, "gen_000002.pt")
    assert metrics(full) == metrics(resumed)
    assert_same_final_population(full, resumed, "gen_000005.pt")
