"""task.refine: a linear feedback term on the best tree, or its constants, tuned by random search
(gprl.rl.refine)."""

import json

import pytest
import torch

import gprl
import gprl.rl.refine as refine_module
from gprl import envs
from gprl.core.encoding import CONST, KIND_MASK
from gprl.rl.policy import ActionMap, evaluate_policies
from gprl.rl.refine import (
    RefineSettings,
    constants_of,
    feedback_scale,
    fold,
    linear_policy,
    pruned_feedback,
    refine,
    tree_numbers,
    with_constants,
    with_numbers,
)
from gprl.train.checkpoint import population_from_state
from gprl.train.tasks.policy import PolicyTask


def test_fold_computes_the_tree_plus_the_linear_term():
    pop = gprl.Population.random(6, 5, 3, max_len=32, seed=2)
    w = torch.randn(3, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    w[1, 2] = 0.0  # a zero weight adds no term
    x = torch.randn(500, 5, generator=torch.Generator().manual_seed(1))
    for i in range(len(pop)):
        folded = fold(pop[i:i + 1], w)
        expected = pop[i:i + 1].forward(x)[0] + x @ w[:, :5].float().T + w[:, 5].float()
        torch.testing.assert_close(folded.forward(x)[0], expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("refine_cfg, match", [
    ({"share": 1.0}, "share must be in"),
    ({"share": 0.3, "pairs": 0}, "pairs must be a positive integer"),
    ({"share": 0.3, "sigma": -1}, "sigma must be a positive number"),
    ({"share": 0.3, "pairs": 4, "top": 8}, "top .8. must be at most"),
    ({"pairs": 4}, "needs a budget"),
    ({"share": 0.3, "steps": 1}, "unknown"),
    ({"share": 0.3, "keep": 2}, "unknown"),
    ({"share": 0.3, "target": "tree"}, "target must be one of"),
    ({"share": 0.3, "episodes": 0}, "episodes must be a positive integer"),
    ({"share": 0.3, "pairs": None, "episodes": 4}, "needs task.refine.pairs"),
    ({"share": 0.3, "prune": 1.0}, "prune must be a share in"),
    ({"share": 0.3, "prune": True}, "prune must be a share in"),
    ({"share": 0.3, "target": "constants", "prune": 0.01}, "prune prunes feedback weights"),
    ({"share": 0.3, "horizon": 0}, "horizon must be a positive integer"),
])
def test_settings_name_the_bad_entry(refine_cfg, match):
    with pytest.raises(ValueError, match=match):
        RefineSettings.from_config(refine_cfg)


def test_settings_must_be_a_mapping():
    with pytest.raises(TypeError, match="must be a mapping"):
        RefineSettings.from_config("yes")


def test_settings_off():
    assert RefineSettings.from_config(None) is None
    assert RefineSettings.from_config(False) is None
    assert RefineSettings.from_config({}) is None
    assert RefineSettings.from_config({"iterations": 3}).pairs == 16


def test_pruned_feedback_keeps_each_actions_heaviest_weights_in_units_of_their_spread():
    """Raw observations: a weight weighs |w| times its observation's spread, so 0.01 on an observation of
    spread 100 outweighs 0.5 on one of spread 0.1; every cut keeps the bias."""
    spread = torch.tensor([100.0, 0.1, 1.0, 1.0, 1.0, 1.0])
    w = torch.tensor([[0.01, 0.5, 0.2, -0.3, 0.0, 0.05, 7.0],
                      [0.0, 0.0, 0.0, 0.0, 0.0, -2.0, 0.5]], dtype=torch.float64)
    cuts = pruned_feedback(w, feedback_scale(spread))
    assert [k for k, _ in cuts] == [2, 3, 4]  # the ladder below the 5 weights action 0 holds
    two = dict(cuts)[2]
    assert two[0].nonzero().flatten().tolist() == [0, 3, 6]  # 1.0 and 0.3 outweigh 0.2, 0.05 and 0.05
    torch.testing.assert_close(two[1], w[1])  # an action with fewer weights keeps them all
    assert dict(cuts)[3][0].nonzero().flatten().tolist() == [0, 2, 3, 6]
    normalised = dict(pruned_feedback(w))[2]  # normalised observations: |w| alone
    assert normalised[0].nonzero().flatten().tolist() == [1, 3, 6]


def test_prune_exports_the_shortest_candidate_within_its_share_of_the_best():
    task = PolicyTask.__new__(PolicyTask)
    rows = [{"validation_return": 100.0, "length": 50}, {"validation_return": 99.0, "length": 5,
                                                           "eliminated": True},
            {"validation_return": 96.0, "length": 20}, {"validation_return": 96.5, "length": 20},
            {"validation_return": 94.9, "length": 10}]
    task.simplify = None
    for prune, pick in [(None, 0), (0.0, 0), (0.05, 3), (0.06, 4)]:
        task.refine_settings = RefineSettings(share=0.3, prune=prune)
        assert task._pick(rows) == pick, prune
    task.refine_settings = None
    assert task._pick(rows) == 0
    for simplify, prune, pick in [(0.06, None, 4), (0.05, 0.06, 4), (0.06, 0.05, 4), (0.0, 0.05, 3)]:
        task.simplify = simplify  # task.simplify's share, the larger where both are set
        task.refine_settings = RefineSettings(share=0.3, prune=prune)
        assert task._pick(rows) == pick, (simplify, prune)


def test_progress_lines_come_by_the_clock_not_by_the_iteration_count(monkeypatch):
    """Iterations of 20 s (full episodes): the first iteration writes a line, then one line per 30 s
    (iterations 3, 5, 7), where a count of iterations would stay silent for minutes."""
    clock = [0.0]
    monkeypatch.setattr(refine_module.time, "perf_counter", lambda: clock[0])

    def play(weights, iteration):
        clock[0] += 20.0
        return -(weights.double() ** 2).sum((1, 2))

    lines: list[str] = []
    refine(torch.zeros(2, 3), 8, RefineSettings(iterations=8, pairs=4), None, 0, play, log=lines.append)
    assert [int(line.split()[2].rstrip(",")) for line in lines] == [1, 3, 5, 7]
    assert lines[1].endswith(", 60 s")


def test_with_constants_writes_each_copy_its_own_constants():
    tree = gprl.Population.from_expressions([["1.5*x0 - 0.25", "sin(x1)*3.0 + x2"]], n_in=3)
    c = constants_of(tree)
    stored = tree.value[0][(tree.kind[0] & KIND_MASK) == CONST].double()  # prefix order
    torch.testing.assert_close(c, stored)
    assert sorted(c.abs().tolist())[-3:] == [0.25, 1.5, 3.0]
    copies = with_constants(tree, torch.stack([2 * c, c]))
    x = torch.randn(200, 3, generator=torch.Generator().manual_seed(0))
    doubled = gprl.Population.from_expressions([["3.0*x0 - 0.5", "sin(x1)*6.0 + x2"]], n_in=3).forward(x)[0]
    torch.testing.assert_close(copies.forward(x)[0], doubled)
    torch.testing.assert_close(copies.forward(x)[1], tree.forward(x)[0])
    assert (copies.kind == tree.kind).all() and (copies.size == tree.size).all()


def test_tree_numbers_lay_out_the_constants_then_the_normalisation():
    tree = gprl.Population.from_expressions([["1.5*x0 - 0.25*x1"]], n_in=2)
    mean, std = torch.tensor([0.5, -1.0]), torch.tensor([2.0, 0.01])
    numbers, scale = tree_numbers(tree, mean, std)
    c = constants_of(tree)
    torch.testing.assert_close(numbers, torch.cat([c, mean.double(), std.double()]))
    torch.testing.assert_close(scale, torch.cat([c.abs().clamp(min=0.1), std.double(), std.double()]))
    moved = numbers.clone()
    moved[-1] = -0.02  # a std pushed below 0 reads as its size
    trees, means, stds = with_numbers(tree, torch.stack([numbers, moved]))
    assert trees.equal(gprl.Population.cat([tree, tree]))
    torch.testing.assert_close(means, torch.stack([mean, mean]).double())
    torch.testing.assert_close(stds, torch.tensor([[2.0, 0.01], [2.0, 0.02]], dtype=torch.float64))


def test_constants_move_in_proportion_to_their_size():
    """Targets 100x apart: perturbations scaled by max(|c|, 0.1) reach both within 2% in 150 iterations."""
    start = torch.tensor([10.0, 0.1, -0.5], dtype=torch.float64)
    target = torch.tensor([13.0, 0.13, -0.65], dtype=torch.float64)

    def play(params, iteration):
        return -(((params.double() - target) / target.abs()) ** 2).sum(1) * 1000

    settings = RefineSettings(iterations=150, pairs=8, top=4, sigma=0.05, step=0.05, target="constants")
    done = refine(start, 16, settings, None, 0, play, scale=start.abs().clamp(min=0.1))
    torch.testing.assert_close(done.params, target, rtol=0.02, atol=0)


def test_feedback_on_raw_observations_moves_each_weight_in_units_of_its_spread():
    """Observations 1,000 times apart in spread: the best weights are 0.5 / spread. Perturbed in units of
    1 / spread both are found within 3% in 100 iterations; in plain units the large-spread weight's steps
    swamp the return and the small-spread one is never found."""
    spread = torch.tensor([100.0, 0.1])
    best = torch.tensor([[0.5 / 100.0, 0.5 / 0.1, 0.2]], dtype=torch.float64)
    scale = feedback_scale(spread)
    torch.testing.assert_close(scale, torch.tensor([[0.01, 10.0, 1.0]], dtype=torch.float64))

    def play(weights, iteration):  # the return of a policy whose terms are w * spread
        w = weights.double()[:, 0] * torch.cat([spread.double(), torch.ones(1, dtype=torch.float64)])
        return -((w - best[0] * torch.cat([spread.double(), torch.ones(1, dtype=torch.float64)])) ** 2).sum(1)

    settings = RefineSettings(iterations=100, pairs=8, top=4, sigma=0.05, step=0.05)
    found = refine(torch.zeros(1, 3), 16, settings, None, 0, play, scale=scale).params
    torch.testing.assert_close(found[:, :2], best[:, :2], rtol=0.03, atol=0)
    assert abs(float(found[0, 2]) - 0.2) < 0.05  # the bias (unit scale) jitters by about a step
    plain = refine(torch.zeros(1, 3), 16, settings, None, 0, play).params
    assert abs(float(plain[0, 1]) - 5.0) > 2.0  # the small-spread weight is nowhere near in plain units


pytest.importorskip("mujoco")


@pytest.fixture
def pendulum():
    """32 training environments (16 perturbations of 2 episodes) and 10 test ones, 200 steps."""
    made = [envs.make("inverted_pendulum", backend="mujoco", num_envs=n, seed=0, episode_length=200,
                      nthread=1) for n in (32, 10)]
    yield made
    for env in made:
        env.close()


@pytest.mark.parametrize("target", ["feedback", "constants"])
def test_refinement_learns_to_balance_the_pendulum(pendulum, target):
    """A tree that pushes nowhere (or a linear tree whose gains are 100 times too small) lets the pendulum
    fall within a few steps; 8 pairs of 2 episodes tuning a linear feedback term for 15 iterations (or the
    tree's own numbers for 20) balance it far longer on fresh starts."""
    env, test = pendulum
    amap = ActionMap.for_env(env)
    mean, std = torch.zeros(env.obs_dim), torch.ones(env.obs_dim)
    if target == "feedback":
        tree = gprl.Population.from_expressions([["0"]], n_in=env.obs_dim)
        start, scale = torch.zeros(env.act_dim, env.obs_dim + 1), None
        settings = RefineSettings(iterations=15, pairs=8, top=4, sigma=0.1, step=0.1, episodes=2)

        def play(weights, iteration):
            policy = linear_policy(tree, weights, mean, std, amap)
            return envs.rollout(env, policy, 16, 2, seed=100 * iteration).mean_return

        def tuned(params):
            return fold(tree, params)
    else:
        tree = gprl.Population.from_expressions([["0.01*x0 + 0.01*x1 + 0.01*x2 + 0.01*x3"]], n_in=4)
        start = constants_of(tree)
        scale = start.abs().clamp(min=0.1)
        settings = RefineSettings(iterations=20, pairs=8, top=4, sigma=0.5, step=0.5, target="constants",
                                  episodes=2)

        def play(values, iteration):
            return evaluate_policies(with_constants(tree, values), env, amap, mean, std, 2,
                                     seed=100 * iteration).returns

        def tuned(params):
            return with_constants(tree, params[None])

    done = refine(start, 16, settings, None, 4, play, scale=scale)
    assert done.iterations == settings.iterations == len(done.history)
    before = evaluate_policies(tree, test, amap, mean, std, 10, seed=123).returns
    after = evaluate_policies(tuned(done.params), test, amap, mean, std, 10, seed=123).returns
    assert float(before) < 30 and float(after) > 4 * float(before), (float(before), float(after))
    if target == "constants":
        assert tuned(done.params).lengths().item() == tree.lengths().item()  # the same formula


@pytest.mark.parametrize("target", ["feedback", "constants"])
def test_the_task_validates_the_refined_tree_and_exports_the_best(tmp_path, target):
    length = 40
    cfg = {"name": "hopper", "backend": "mujoco", "episode_length": length, "kwargs": {"nthread": 1}}
    task = PolicyTask(cfg, pop_size=16, seed=3, device="cpu", validation_episodes=3,
                      refine={"iterations": 3, "pairs": 4, "target": target, "episodes": 2})
    try:
        assert task.refine_share == 0.0
        pop = gprl.Population.random(16, task.n_in, task.n_out, max_len=32, seed=5)
        fitness, _ = task.evaluate(pop, generation=0)
        report = task.refine(None)
        assert report["refine_iterations"] == 3
        cands, rows = task.validated
        assert cands[-1]["source"] == rows[-1]["source"] == "refined"
        best = cands[max(range(len(rows) - 1), key=lambda k: rows[k]["validation_return"])]
        if target == "constants":  # the same formula, other numbers
            assert report["refine_constants"] == int((best["tree"]["kind"] == 2).sum())
            assert all(torch.equal(best["tree"][k], cands[-1]["tree"][k]) for k in ("kind", "code", "size"))
            assert not torch.equal(best["std"], cands[-1]["std"])  # the normalisation is tuned too
            assert (cands[-1]["std"] > 0).all()
        assert rows[-1]["validation_return"] == report["refined_validation_return"]
        # the refined candidate's validation is its folded tree's return on the recorded starts
        h = cands[-1]
        env = envs.make("hopper", backend="mujoco", num_envs=3, seed=0, episode_length=length, nthread=1)
        again = evaluate_policies(population_from_state(h["tree"], "cpu"), env, task.action_map, h["mean"],
                                  h["std"], 3, length, seed=rows[-1]["validation_seed"]).returns
        env.close()
        assert rows[-1]["validation_return"] == pytest.approx(float(again), rel=1e-5)
        out = task.finish(pop, fitness, str(tmp_path))
        meta = json.loads((tmp_path / "policy.json").read_text())["meta"]
        assert [r["source"] for r in meta["candidates"]][-1] == "refined"
        best = max(rows, key=lambda r: r["validation_return"])
        assert out["validation_return"] == best["validation_return"]
    finally:
        task.close()


def test_the_task_validates_the_pruned_feedbacks_beside_the_refined_tree(tmp_path):
    """task.refine.prune: the tuned feedback cut to 2, 3, 4, 6 and 8 of hopper's 11 weights per action,
    each validated on its own recorded starts; the export is the candidate the prune rule picks."""
    length = 40
    cfg = {"name": "hopper", "backend": "mujoco", "episode_length": length, "kwargs": {"nthread": 1}}
    task = PolicyTask(cfg, pop_size=16, seed=3, device="cpu", validation_episodes=3,
                      refine={"iterations": 3, "pairs": 4, "episodes": 2, "prune": 0.2})
    try:
        pop = gprl.Population.random(16, task.n_in, task.n_out, max_len=32, seed=5)
        fitness, _ = task.evaluate(pop, generation=0)
        report = task.refine(None)
        cands, rows = task.validated
        refined = [r["source"] for r in rows].index("refined")
        pruned = rows[refined + 1:]
        assert [r["source"] for r in pruned] == ["pruned"] * 5
        assert [r["terms"] for r in pruned] == [2, 3, 4, 6, 8]
        lengths = [r["length"] for r in pruned] + [rows[refined]["length"]]
        assert lengths == sorted(lengths) and lengths[0] < lengths[-1]
        for h, r in zip(cands[refined + 1:], pruned):
            assert report[f"pruned_{r['terms']}_validation_return"] == r["validation_return"]
            assert r["length"] == population_from_state(h["tree"], "cpu").lengths().item()
            env = envs.make("hopper", backend="mujoco", num_envs=3, seed=0, episode_length=length, nthread=1)
            again = evaluate_policies(population_from_state(h["tree"], "cpu"), env, task.action_map,
                                      h["mean"], h["std"], 3, length, seed=r["validation_seed"]).returns
            env.close()
            assert r["validation_return"] == pytest.approx(float(again), rel=1e-5)
        out = task.finish(pop, fitness, str(tmp_path))
        picked = rows[task._pick(rows)]
        assert out["validation_return"] == picked["validation_return"]
        assert out["tree_length"] == picked["length"]
        meta = json.loads((tmp_path / "policy.json").read_text())["meta"]
        assert meta["validation"]["source"] == picked["source"]
    finally:
        task.close()


def test_a_search_ended_by_its_generations_refines_for_its_share_of_that_time(tmp_path):
    from tests.train.helpers import TINY, run_train

    run_train(tmp_path, "run", *TINY, "gp.generations=2", "gp.time_limit=600", "wandb.mode=disabled",
              "progress=false", "task.refine={share: 0.5, pairs: 2}")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert summary["stopped_by"] == "generations" and summary["refine_iterations"] >= 1
    # share 0.5: as long as the evolution (its last generation's clock, plus the last variation), not 300 s
    assert summary["refine_s"] < rows[-1]["elapsed_s"] + 3
    record = json.loads((tmp_path / "run" / "policy.json").read_text())
    assert "refined" in [c["source"] for c in record["meta"]["candidates"]]


def test_the_feedback_on_raw_observations_is_scaled_by_their_spread_under_the_best_tree(monkeypatch):
    """normalize_obs false: the refinement gets 1 / the spread of the best tree's own observations on one
    batch of fresh episodes (played again here); with normalisation it gets none (units of the spread
    already)."""
    import gprl.train.tasks.policy as policy_module

    seen = []

    def spy(start, rows, settings, seconds, seed, play, agree=lambda go: go, log=None, scale=None):
        seen.append(scale)
        return refine(start, rows, settings, seconds, seed, play, agree, log, scale)

    monkeypatch.setattr(policy_module, "refine", spy)
    for normalize in (False, True):
        cfg = {"name": "hopper", "backend": "mujoco", "episode_length": 30, "kwargs": {"nthread": 1},
               "normalize_obs": normalize}
        task = PolicyTask(cfg, pop_size=8, seed=3, device="cpu", validation_episodes=2,
                          refine={"iterations": 1, "pairs": 3})
        try:
            pop = gprl.Population.random(8, task.n_in, task.n_out, max_len=32, seed=5)
            task.evaluate(pop, generation=0)
            best, _ = task.validate()
            h = task.candidates()[best]
            task.refine(None)
            if normalize:
                assert seen[-1] is None
                continue
            env = envs.make("hopper", backend="mujoco", num_envs=6, seed=0, episode_length=30, nthread=1)
            tree = population_from_state(h["tree"], "cpu")
            ev = evaluate_policies(tree[torch.zeros(6, dtype=torch.long)], env, task.action_map, h["mean"],
                                   h["std"], 1, 30, seed=task._seed(0x5EED, 4), collect_stats=True)
            env.close()
            count, total, total_sq = (x.sum(0) for x in ev.obs_stats)
            spread = (total_sq / count - (total / count) ** 2 + 1e-8).sqrt()
            torch.testing.assert_close(seen[-1], feedback_scale(spread), rtol=1e-5, atol=0)
        finally:
            task.close()


@pytest.mark.parametrize("target", ["feedback", "constants"])
def test_the_refinement_plays_episodes_of_its_horizon(monkeypatch, target):
    """``horizon: 10`` of 40-step episodes: every perturbation's episode stops within 10 steps, and the
    refined tree is validated on full-length episodes as before."""
    import gprl.rl.policy as policy_module

    calls = []
    real = envs.rollout

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)
        calls.append((kwargs.get("max_steps"), float(result.lengths.max())))
        return result

    monkeypatch.setattr(envs, "rollout", spy)
    monkeypatch.setattr(policy_module, "rollout", spy)
    cfg = {"name": "hopper", "backend": "mujoco", "episode_length": 40, "kwargs": {"nthread": 1}}
    task = PolicyTask(cfg, pop_size=16, seed=3, device="cpu", validation_episodes=3,
                      refine={"iterations": 2, "pairs": 4, "target": target, "horizon": 10})
    try:
        task.evaluate(gprl.Population.random(16, task.n_in, task.n_out, max_len=32, seed=5), generation=0)
        calls.clear()
        task.refine(None)
        short = [longest for steps, longest in calls if steps == 10]
        assert len(short) == 2 and max(short) <= 10  # one batch an iteration
        assert all(steps in (None, 40) for steps, _ in calls if steps != 10)  # validation: full length
    finally:
        task.close()


def test_a_horizon_past_the_episode_names_both():
    cfg = {"name": "hopper", "backend": "mujoco", "episode_length": 40, "kwargs": {"nthread": 1}}
    match = r"task.refine.horizon \(50\) must be at most env.episode_length \(40\)"
    with pytest.raises(ValueError, match=match):
        PolicyTask(cfg, pop_size=16, seed=3, device="cpu", refine={"iterations": 2, "horizon": 50})


def test_a_constants_refinement_does_not_take_the_default_feedbacks_settings():
    from gprl.train.trainer import apply_backend_defaults

    def refine(mine):
        cfg = {"env": {"name": "Pendulum-v1", "backend": "classic"}, "gp": {},
               "task": {"name": "policy", "refine": mine,
                        "per_backend": {"classic": {"task": {"refine": {"share": 0.25, "prune": 0.02}}}}}}
        return apply_backend_defaults(cfg)["task"]["refine"]

    assert refine(None) == {"share": 0.25, "prune": 0.02}
    assert refine({"pairs": 32}) == {"share": 0.25, "prune": 0.02, "pairs": 32}  # laid over the default
    constants = {"target": "constants", "share": 0.3}
    assert refine(constants) == constants  # prune applies to feedback only: not taken
    RefineSettings.from_config(refine(constants))
