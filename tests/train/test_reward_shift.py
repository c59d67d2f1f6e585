"""env.reward_shift: the search's fitness is each live step's reward less the shift; reported, validated and
exported returns stay the environment's own."""

import math

import pytest
import torch

import gprl
from gprl import envs
from gprl.rl.policy import evaluate_policies
from gprl.train.tasks.policy import PolicyTask

pytest.importorskip("mujoco")

P, LENGTH, SHIFT = 16, 60, 1.0


def make_task(shift, racing=None) -> PolicyTask:
    cfg = {"name": "hopper", "backend": "mujoco", "episodes": 1, "episode_length": LENGTH,
           "reward_shift": shift,
           "racing": racing, "kwargs": {"nthread": 1}}
    return PolicyTask(cfg, pop_size=P, seed=3, device="cpu", validation_episodes=2)


def play(task: PolicyTask, pop, steps: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(returns, episode lengths) of ``pop`` in a fresh environment, normalised as a first generation."""
    env = envs.make("hopper", backend="mujoco", num_envs=len(pop), seed=0, episode_length=LENGTH, nthread=1)
    try:
        zeros, ones = torch.zeros(task.n_in), torch.ones(task.n_in)
        ev = evaluate_policies(pop, env, task.action_map, zeros, ones, 1, steps, seed=seed,
                               common_starts=True)
        return ev.returns, ev.lengths
    finally:
        env.close()


def test_fitness_is_the_return_less_the_shift_per_live_step():
    task = make_task(SHIFT)
    try:
        pop = gprl.Population.random(P, task.n_in, task.n_out, max_len=32, seed=5)
        fitness, metrics = task.evaluate(pop, generation=0)
        ret, lengths = play(task, pop, LENGTH, task._seed(0, 7))
        assert len(set(lengths.tolist())) > 1  # random hoppers fall at different steps: the shift differs
        torch.testing.assert_close(fitness.double(), (ret - SHIFT * lengths).float().double())
        best = int(torch.argmax(ret - SHIFT * lengths))
        assert metrics["best_return"] == pytest.approx(float(ret[best]))  # the search best's true return
        assert task.hof[0]["fitness"] == pytest.approx(float(ret[best] - SHIFT * lengths[best]))
        _, rows = task.validate()
        assert rows[0]["train_return"] == pytest.approx(float(ret[best]))
    finally:
        task.close()


def test_racing_shifts_the_short_and_the_whole_episodes():
    task = make_task(SHIFT, racing={"horizon": 0.5, "finalists": 0.25})
    try:
        pop = gprl.Population.random(P, task.n_in, task.n_out, max_len=32, seed=7)
        fitness, metrics = task.evaluate(pop, generation=2)
        ret, lengths = play(task, pop, LENGTH // 2, task._seed(2, 7))
        expected = ret - SHIFT * lengths
        top = torch.topk(expected, 4).indices  # finalists by the shifted short returns
        whole, whole_lengths = play(task, pop[top], LENGTH, task._seed(2, 11))
        expected[top] = whole - SHIFT * whole_lengths
        torch.testing.assert_close(fitness.double(), expected.float().double())
        assert metrics["best_return"] == pytest.approx(float(whole[torch.argmax(expected[top])]))
    finally:
        task.close()


def test_no_shift_is_the_plain_return_and_a_bad_shift_is_refused():
    pop = gprl.Population.random(P, 11, 3, max_len=32, seed=6)
    plain, zero = make_task(None), make_task(0.0)
    try:
        a, _ = plain.evaluate(pop, 0)
        b, _ = zero.evaluate(pop, 0)
        ret, _ = play(plain, pop, LENGTH, plain._seed(0, 7))
        assert torch.equal(a, b) and torch.equal(a, ret.float())
    finally:
        plain.close()
        zero.close()
    with pytest.raises(ValueError, match="env.reward_shift"):
        make_task(math.nan)
