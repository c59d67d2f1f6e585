"""Racing (env.racing): everyone plays the first share of the episode, the best share plays whole episodes."""

import pytest
import torch

import gprl
from gprl import envs
from gprl.rl.policy import evaluate_policies
from gprl.train.distributed import Dist
from gprl.train.tasks.policy import PolicyTask, racing_shares

pytest.importorskip("mujoco")

P, LENGTH = 12, 40


def make_task(racing, **kw) -> PolicyTask:
    cfg = {"name": "halfcheetah", "backend": "mujoco", "episodes": 1, "episode_length": LENGTH,
           "racing": racing,
           "kwargs": {"nthread": 1}}
    return PolicyTask(cfg, pop_size=P, seed=3, device="cpu", validation_episodes=2, **kw)


def play(task: PolicyTask, pop, num_envs: int, episodes: int, steps: int, seed: int) -> torch.Tensor:
    """Mean returns of ``pop`` in a fresh environment, normalised as the task's first generation is."""
    env = envs.make("halfcheetah", backend="mujoco", num_envs=num_envs, seed=0, episode_length=LENGTH,
                    nthread=1)
    try:
        zeros, ones = torch.zeros(task.n_in), torch.ones(task.n_in)
        return evaluate_policies(pop, env, task.action_map, zeros, ones, episodes, steps, seed=seed,
                                 common_starts=True).returns
    finally:
        env.close()


def test_finalists_play_whole_episodes_the_others_keep_short_returns():
    task = make_task({"horizon": 0.25, "finalists": 0.25, "episodes": 2})
    try:
        pop = gprl.Population.random(P, task.n_in, task.n_out, max_len=32, seed=5)
        fitness, metrics = task.evaluate(pop, generation=4)
        short = play(task, pop, P, 1, LENGTH // 4, task._seed(4, 7))
        top = torch.topk(short, 3).indices  # ceil(0.25 * 12) finalists
        whole = play(task, pop[top], 3 * 2, 2, LENGTH, task._seed(4, 11))
        expected = short.clone()
        expected[top] = whole
        torch.testing.assert_close(fitness.double(), expected.float().double())
        assert metrics["racing_length"] == LENGTH // 4 and metrics["episode_length"] == LENGTH
        assert metrics["env_steps"] == P * LENGTH // 4 + 3 * 2 * LENGTH  # HalfCheetah never ends early
        # the generation's best is a finalist's whole-episode return, even where a short return is higher
        assert metrics["best_return"] == pytest.approx(float(whole.max()))
        assert task.hof[0]["fitness"] == pytest.approx(float(whole.max()))
    finally:
        task.close()


def test_racing_settings_are_checked():
    assert racing_shares(None) == (1.0, 1.0, None)
    assert racing_shares({"horizon": 0.2, "finalists": 0.1, "episodes": 3}) == (0.2, 0.1, 3)
    bad_settings = (({"horizon": 0}, "horizon"), ({"finalists": 1.5}, "finalists"),
                    ({"episodes": 0}, "episodes"), ({"episodes": 2.5}, "episodes"), ({"share": 1}, "takes"))
    for bad, match in bad_settings:
        with pytest.raises(ValueError, match=match):
            racing_shares(bad)
    # every process of a distributed run plays at least one finalist
    with pytest.raises(ValueError, match="env.racing.finalists"):
        make_task({"horizon": 0.5, "finalists": 0.1}, dist=Dist(rank=0, world_size=4))


def test_racing_off_is_the_plain_evaluation():
    pop = gprl.Population.random(P, 17, 6, max_len=32, seed=6)
    off, on = make_task({"horizon": 1.0, "finalists": 0.25}), make_task(None)
    try:
        a, ma = off.evaluate(pop, 0)
        b, mb = on.evaluate(pop, 0)
        assert torch.equal(a, b) and "racing_length" not in ma and ma["env_steps"] == mb["env_steps"]
    finally:
        off.close()
        on.close()
