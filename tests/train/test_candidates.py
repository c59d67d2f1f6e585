"""The last generation's best trees (task.final_candidates) and its front of length against score are
validated beside the hall of fame."""

import pytest
import torch

import gprl
from gprl import envs
from gprl.rl.policy import evaluate_policies
from gprl.train.checkpoint import population_from_state, population_state
from gprl.train.tasks.policy import PolicyTask, length_front

pytest.importorskip("mujoco")

P, LENGTH = 16, 50


def make_task(final_candidates, hall_of_fame=2, validation_keep=None) -> PolicyTask:
    cfg = {"name": "hopper", "backend": "mujoco", "episode_length": LENGTH, "kwargs": {"nthread": 1}}
    return PolicyTask(cfg, pop_size=P, seed=4, device="cpu", hall_of_fame=hall_of_fame, validation_episodes=3,
                      final_candidates=final_candidates, validation_keep=validation_keep)


def replayed(task, cand, seed, episodes) -> float:
    """A candidate's mean return on ``episodes`` episodes from ``seed + e``, played on its own."""
    env = envs.make("hopper", backend="mujoco", num_envs=episodes, seed=0, episode_length=LENGTH, nthread=1)
    try:
        tree = population_from_state(cand["tree"], "cpu")
        ev = evaluate_policies(tree, env, task.action_map, cand["mean"], cand["std"], episodes, LENGTH,
                               seed=seed)
        return float(ev.returns[0])
    finally:
        env.close()


def key(state) -> tuple[bytes, ...]:
    return tuple(bytes(state[k].numpy()) for k in ("kind", "code", "out", "value"))


def test_the_last_generations_best_join_the_hall_of_fame_and_are_validated_alike():
    task = make_task(5)
    try:
        for g in range(3):
            pop = gprl.Population.random(P, task.n_in, task.n_out, max_len=32, seed=10 + g)
            fitness, _ = task.evaluate(pop, generation=g)
        cands = task.candidates()
        hof = [c for c in cands if c["source"] == "hall_of_fame"]
        last = [c for c in cands if c["source"] == "last_generation"]
        assert len(hof) == 2 and all(c["generation"] == 2 for c in last)
        # the last generation's five best by fitness, then its front of length against fitness, less any
        # tree the hall of fame (or the list) already holds
        top = torch.topk(fitness, 5).indices.tolist()
        top += [j for j in length_front(pop.lengths(), fitness).tolist() if j not in top]
        held = {key(h["tree"]) for h in hof if torch.equal(h["mean"], last[0]["mean"])}
        want = []
        for j in top:
            k = key(population_state(pop[j:j + 1]))
            if k not in held:
                held.add(k)
                want.append(j)
        assert [c["fitness"] for c in last] == pytest.approx([float(fitness[j]) for j in want])

        best, rows = task.validate(cands)
        assert [r["source"] for r in rows] == [c["source"] for c in cands]
        for c, r in zip(cands, rows):  # each candidate's block of episodes, replayed on its own
            again = replayed(task, c, r["validation_seed"], 3)
            assert r["validation_return"] == pytest.approx(again, rel=1e-9)
        assert rows[best]["validation_return"] == max(r["validation_return"] for r in rows)
    finally:
        task.close()


def test_a_second_validation_round_on_fresh_starts_decides_among_the_first_rounds_best():
    one, two = make_task(6), make_task(6, validation_keep=0.5)
    try:
        for g in range(2):
            pop = gprl.Population.random(P, one.n_in, one.n_out, max_len=32, seed=20 + g)
            one.evaluate(pop, generation=g)
            two.evaluate(pop, generation=g)
        cands = two.candidates()
        K = len(cands)
        _, first = one.validate(cands)
        best, rows = two.validate(cands)
        order = sorted(range(K), key=lambda k: -first[k]["validation_return"])
        kept, out = order[:-(-K // 2)], order[-(-K // 2):]
        assert all(rows[k].get("eliminated") for k in out) and best in kept
        assert [rows[k] for k in out] == [{**first[k], "eliminated": True} for k in out]
        episodes = sum(rows[k]["validation_episodes"] for k in kept)
        assert episodes == 3 * K  # the second round plays as many episodes as the first
        for k in kept:  # fresh starts, the first round's figure kept beside
            r = rows[k]
            assert r["first_round_return"] == first[k]["validation_return"]
            assert r["validation_seed"] != first[k]["validation_seed"]
            assert r["validation_return"] == pytest.approx(
                replayed(two, cands[k], r["validation_seed"], r["validation_episodes"]), rel=1e-9)
        assert rows[best]["validation_return"] == max(rows[k]["validation_return"] for k in kept)
    finally:
        one.close()
        two.close()
    for bad in (0, 1, 1.5, True, "half"):
        with pytest.raises(ValueError, match="task.validation_keep"):
            make_task(2, validation_keep=bad)
    off = make_task(2, validation_keep=False)  # turns a per-backend default off
    try:
        assert off.validation_keep is None
    finally:
        off.close()


def test_length_front_keeps_the_trees_no_shorter_tree_matches():
    lengths = torch.tensor([5, 3, 3, 9, 1, 7, 4])
    score = torch.tensor([2.0, 1.0, 1.5, 0.0, -3.0, 5.0, float("nan")])
    assert length_front(lengths, score).tolist() == [4, 2, 0, 5]  # 1 loses to 2 (as long), 6 is NaN
    assert length_front(lengths, score, most=2).tolist() == [0, 5]  # the two highest, shortest first


def test_the_front_alone_by_default_kept_through_a_checkpoint_and_checked():
    plain = make_task(0)
    try:
        pop = gprl.Population.random(P, plain.n_in, plain.n_out, max_len=32, seed=1)
        fitness, _ = plain.evaluate(pop, 0)
        last = [c for c in plain.candidates() if c["source"] == "last_generation"]
        front = length_front(pop.lengths(), fitness)
        assert 1 <= len(last) <= len(front)
        assert {round(c["fitness"], 3) for c in last} <= {round(float(fitness[j]), 3) for j in front}
    finally:
        plain.close()
    a, b = make_task(3), make_task(3)
    try:
        a.evaluate(gprl.Population.random(P, a.n_in, a.n_out, max_len=32, seed=2), 0)
        b.load_state_dict(a.state_dict())
        assert [c["fitness"] for c in b.candidates()] == [c["fitness"] for c in a.candidates()]
    finally:
        a.close()
        b.close()
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="task.final_candidates"):
            make_task(bad)
