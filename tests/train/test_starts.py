"""Every tree of a generation plays the same starts, as many per tree as a generation's step budget allows."""

import pytest
import torch

import gprl
from gprl.train.tasks.policy import MAX_STARTS, STARTS_STEPS, PolicyTask, starts_per_tree


def test_starts_per_tree_is_a_power_of_two_within_the_step_budget():
    for pop, length in [(256, 500), (256, 200), (1000, 50), (256, 1000), (1000, 1000), (4096, 1000), (3, 7)]:
        e = starts_per_tree(pop, length)
        assert e & (e - 1) == 0 and 1 <= e <= MAX_STARTS
        assert e == 1 or pop * length * e <= STARTS_STEPS  # within the budget where more than one
        assert e == MAX_STARTS or pop * length * 2 * e > STARTS_STEPS  # and no room for twice as many
    assert [starts_per_tree(256, 500), starts_per_tree(256, 200), starts_per_tree(1000, 1000)] == [2, 4, 1]


def test_the_trees_of_a_generation_share_their_starts_and_a_null_count_fills_the_budget():
    cfg = {"name": "Pendulum-v1", "backend": "classic", "episode_length": 200, "episodes": None}
    task = PolicyTask(cfg, pop_size=64, seed=3, device="cpu", validation_episodes=2)
    try:
        assert task.episodes == starts_per_tree(64, 200) == MAX_STARTS and task.env.num_envs == 64 * 8
        one = gprl.Population.random(8, task.n_in, task.n_out, max_len=16, seed=1)
        pop = one[torch.arange(64) % 8]  # every tree eight times
        fitness, _ = task.evaluate(pop, generation=0)
        assert torch.equal(fitness.reshape(8, 8), fitness[:8].expand(8, 8))  # the same starts for every copy
        again, _ = task.evaluate(pop, generation=1)
        assert not torch.equal(fitness, again)  # new starts each generation
    finally:
        task.close()
    with pytest.raises(ValueError, match="env.episodes must be a positive integer"):
        PolicyTask({**cfg, "episodes": 0}, pop_size=4, seed=0, device="cpu")
