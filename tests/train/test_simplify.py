"""task.simplify: the tree to export simplified by evaluation on its own episodes, validated beside the
candidates, and the shortest within the share of the best exported."""

import json

import pytest

import gprl
from gprl.train.checkpoint import population_from_state
from gprl.train.tasks.policy import SIMPLIFY_TOLERANCES, PolicyTask
from tests.train.test_candidates import LENGTH, replayed

pytest.importorskip("mujoco")

# hopper's three actions: a branch no normalised observation takes (max(x1, 100) is 100), tiny terms, and a
# comparison that always comes out the same way, around the terms that drive the actions
ACTIONS = ["0.8*x0 + max(x1, 100.0) - 100.0 + 0.001*x2", "x3 - 0.3*x4 + 0.0001*x5 + 0.0001*x6",
           "0.5*x7 - x8 + 0.01*gt(x9, 1000.0)"]


def make_task(simplify, validation_episodes=3) -> PolicyTask:
    cfg = {"name": "hopper", "backend": "mujoco", "episode_length": LENGTH, "kwargs": {"nthread": 1}}
    return PolicyTask(cfg, pop_size=16, seed=2, device="cpu", hall_of_fame=2,
                      validation_episodes=validation_episodes, simplify=simplify)


@pytest.mark.parametrize("validation_episodes", [3, 0])  # 0: the training batch plays the recorded episodes
def test_the_simplified_trees_are_validated_and_the_shortest_within_the_share_exported(tmp_path,
                                                                                       validation_episodes):
    task = make_task(0.5, validation_episodes)
    try:
        tree = gprl.Population.from_expressions([ACTIONS], n_in=task.n_in)
        pop = tree[[0] * 16]
        fitness, _ = task.evaluate(pop, generation=0)
        out = task.finish(pop, fitness, str(tmp_path))
    finally:
        task.close()
    meta = json.loads((tmp_path / "policy.json").read_text())["meta"]
    rows = meta["candidates"]
    base = rows[0]
    simplified = [r for r in rows if r["source"] == "simplified"]
    assert simplified, "no simplified tree"
    tolerances = [r["tolerance"] for r in simplified]
    assert tolerances == sorted(tolerances) and set(tolerances) <= set(SIMPLIFY_TOLERANCES)
    lengths = [r["length"] for r in simplified]
    assert lengths == sorted(lengths, reverse=True) and lengths[0] < base["length"]
    # the first drops at least the branch never taken, the tiny terms and the comparison
    assert lengths[0] <= base["length"] - 12
    picked = rows[task._pick(rows)]
    assert meta["validation"] == picked and picked["source"] == "simplified"
    assert out["tree_length"] == picked["length"]


def test_each_simplified_tree_replays_its_validation_return():
    task = make_task(0.5)
    try:
        tree = gprl.Population.from_expressions([ACTIONS], n_in=task.n_in)
        task.evaluate(tree[[0] * 16], generation=0)
        cands = task.candidates()
        _, rows = task.validate(cands)
        cands, rows = task._simplified(cands, rows)
    finally:
        task.close()
    found = [(h, r) for h, r in zip(cands, rows) if r["source"] == "simplified"]
    assert found
    for h, r in found:
        assert r["length"] == population_from_state(h["tree"], "cpu").lengths().item()
        assert r["validation_return"] == pytest.approx(replayed(task, h, r["validation_seed"],
                                                                r["validation_episodes"]), rel=1e-5)


@pytest.mark.parametrize("bad", [1.0, -0.1, "yes", True])
def test_a_share_outside_zero_to_one_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="task.simplify"):
        make_task(bad)
