"""gp.draws: the search starts from several fresh populations, each evolved gp.draw_generations generations on
its own episode schedule and observation statistics, then the best goes on; a resumed run keeps the draw it
had kept."""

import re
import shutil
from types import SimpleNamespace

import pytest
import torch

import gprl
from gprl.evolve.draws import Draws
from gprl.train.checkpoint import population_from_state
from gprl.train.trainer import make_gp
from tests.train.helpers import assert_same_final_population, metrics, train

pytest.importorskip("mujoco")

# TINY's schedule: 30-step episodes at a draw's generation 0, 45 at 1, the full 60 from 2
# seed 2 keeps the first draw, so the kept population and statistics come back; no reward shift: the fitness
# is the return the metrics log
RUNS = ["gp.generations=8", "gp.draws=3", "gp.draw_generations=2", "checkpoint_every=1",
        "keep_checkpoints=20", "env.reward_shift=0", "seed=2", "wandb.mode=disabled",
        "gp.init_every_output=false"]  # the draws as seed 2 plays them with plain initial trees


def same(a: gprl.Population, b: gprl.Population) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))


def population(state) -> gprl.Population:
    return population_from_state(state, "cpu")


def rows(pop: gprl.Population) -> set:
    """Each tree as a hashable row of its tensors."""
    return {tuple(torch.cat([t[i].flatten().double() for t in pop.tensors()]).tolist())
            for i in range(len(pop))}


def test_draws_count_their_generations():
    d = Draws(3, 2)
    assert [d.ends(g) for g in range(8)] == [None, 0, None, 1, None, 2, None, None]
    assert [d.index(g) for g in range(8)] == [0, 0, 1, 1, 2, 2, None, None] and Draws().index(0) is None
    assert [d.schedule_generation(g) for g in range(8)] == [0, 1, 0, 1, 0, 1, 2, 3]
    assert Draws.from_config({"draws": 1, "draw_generations": 5}) == Draws()
    assert [Draws().schedule_generation(g) for g in (0, 7)] == [0, 7] and Draws().ends(0) is None
    # a time limit the draws use up at the first draw's pace is named, with the limit that lets one go on
    five = Draws(5, 15)
    note = five.budget_note(110.0, 480.0, 480.0)
    assert "ends inside the 5 draws" in note and "gp.time_limit above about 550 s" in note
    # half the time limit a refinement's: the limit named is the whole run's
    assert five.budget_note(110.0, 300.0, 600.0).endswith("about 1100 s lets the best draw go on")
    assert five.budget_note(90.0, 480.0, 480.0) is None and five.budget_note(110.0, None, None) is None


def test_restart_draws_another_population_and_hides_no_strategy_rows():
    """A fresh draw (``restart``) is another random population; the evolution strategy reads no pairs from
    it, so its best tree, wherever it sits, stays the elite."""
    gp = gprl.GeneticProgramming(4, 2, population_size=68, es_share=0.25, es_pairs=8, seed=1)
    assert gp.es is not None and gp.es.rows == 17
    pop = gp.init()
    fit = torch.arange(68, dtype=torch.float32)  # lower is better: row 0 the best
    pop = gp.step(pop, fit)
    fresh = gp.restart(pop, fit)
    assert gp.generation == gp.fresh_at == 2
    assert same(fresh, gp.init(run=2)) and not same(fresh, gp.init())
    # the best tree sits in the strategy's rows: a fresh population has no pairs there, so it is the elite
    fit = torch.arange(68, 0, -1, dtype=torch.float32)
    child = gp.step(fresh, fit)
    assert same(child[:1], fresh[67:68])
    # a step after a step does hide those rows from elitism (its pairs)
    nxt = gp.step(child, fit)
    assert not same(nxt[:1], child[67:68])


@pytest.mark.parametrize("gp, words", [
    ({"draws": 2}, "gp.draw_generations"),
    ({"draws": 0}, "gp.draws"),
    ({"draws": 2, "draw_generations": True}, "gp.draw_generations"),
])
def test_bad_draws_are_named(gp, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        Draws.from_config(gp)


def test_a_resume_changes_the_draws_only_while_they_last():
    run = Draws(5, 15)
    for new, g in [(Draws(10, 15), 56), (Draws(4, 15), 56), (Draws(3, 10), 0), (run, 90), (Draws(), 14)]:
        # more or fewer draws inside them, anything at generation 0 (nothing played yet), no change
        new.check_resume(run, g)
    for new, g, why in [(Draws(10, 15), 75, "its draws ended at generation 75"),
                        (Draws(3, 15), 56, "draw 4 is under way"),
                        (Draws(), 20, "draw 2 is under way"),
                        (Draws(5, 10), 20, "its draws are of 15 generations")]:
        with pytest.raises(ValueError, match=re.escape(why) + ".*resume with the run's gp.draws=5 "
                                                          "gp.draw_generations=15"):
            new.check_resume(run, g)
    with pytest.raises(ValueError, match="it has no draws"):
        Draws(2, 3).check_resume(Draws(), 4)


def test_the_best_draw_goes_on_with_its_schedule_and_statistics_and_resumes(tmp_path):
    res = train(tmp_path, "full", *RUNS)
    assert "going on from the best of 3 draws of 2 generations" in res.stdout
    kept = int(re.search(r"gprl: draw (\d) of 3 goes on", res.stdout).group(1)) - 1
    full = tmp_path / "full"
    rows_ = metrics(full)
    assert [r["episode_length"] for r in rows_] == [30, 45, 30, 45, 30, 45, 60, 60]
    assert [r["draw"] for r in rows_] == [1, 1, 2, 2, 3, 3, 1, 1]
    # the draw kept is the one whose last generation scored best
    last = [rows_[2 * d + 1]["best_return"] for d in range(3)]
    assert kept == max(range(3), key=last.__getitem__)
    ckpt = {g: torch.load(full / "checkpoints" / f"gen_{g:06d}.pt", weights_only=False) for g in range(1, 9)}
    gp_cfg = dict(ckpt[1]["config"]["gp"], population_size=12, max_len=int(ckpt[1]["fingerprint"]["max_len"]))
    gp = make_gp(gp_cfg, SimpleNamespace(n_in=11, n_out=3, maximize=True, device="cpu"), 2)  # seed 2
    for g in range(1, 7):  # generations 2 and 4 start fresh draws, on fresh observation statistics
        assert same(population(ckpt[g]["population"]), gp.init(run=g)) == (g in (2, 4)), g
        assert (float(ckpt[g]["task"]["normalizer"]["count"]) == 0) == (g in (2, 4)), g
    # generation 6 is bred from the kept draw's last population (its elites are copies), on its statistics
    ends = {d: rows(population(ckpt[2 * d + 1]["population"])) for d in range(3)}
    elites = rows(population(ckpt[6]["population"])[:2])
    assert elites <= ends[kept] and not any(elites <= ends[d] for d in range(3) if d != kept)
    saved = ckpt[2]["draws"]
    assert saved["draw"] == 0 and ckpt[5]["draws"]["draw"] == 0 and ckpt[6]["draws"] is None
    for k in ("count", "mean64", "m2"):
        assert torch.equal(ckpt[6]["task"]["normalizer"][k], saved["task"]["normalizer"][k]), k
    # a run resumed inside the second draw keeps the first draw's record and ends as the uninterrupted one
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    for g in range(4, 9):
        (resumed / "checkpoints" / f"gen_{g:06d}.pt").unlink()
    (resumed / "summary.json").unlink()
    assert ckpt[3]["draws"]["draw"] == 0
    train(tmp_path, "resumer", *RUNS, f"resume={resumed}")
    assert metrics(full) == metrics(resumed)
    assert_same_final_population(full, resumed, "gen_000008.pt")
    # resumed after the draws, the metrics still name the draw that went on
    after = tmp_path / "after"
    shutil.copytree(full, after)
    (after / "checkpoints" / "gen_000008.pt").unlink()
    (after / "summary.json").unlink()
    train(tmp_path, "resumer2", *RUNS, f"resume={after}")
    assert metrics(after) == metrics(full)
    # more draws: inside the draws two more are played before the best goes on; after them, refused
    more = ["gp.draws=5", "gp.generations=12", "resume_allow_changes=true"]
    grown = tmp_path / "grown"
    shutil.copytree(full, grown)
    for g in range(4, 9):
        (grown / "checkpoints" / f"gen_{g:06d}.pt").unlink()
    (grown / "summary.json").unlink()
    res = train(tmp_path, "grower", *RUNS, *more, f"resume={grown}")
    assert "gprl: draw " in res.stdout and " of 5 goes on" in res.stdout
    grown_rows = metrics(grown)
    assert grown_rows[:4] == metrics(full)[:4]
    assert [r["draw"] for r in grown_rows[:10]] == [1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    assert [r["episode_length"] for r in grown_rows] == [30, 45] * 5 + [60, 60]
    before = (after / "metrics.jsonl").read_text()
    res = train(tmp_path, "refused", *RUNS, *more, f"resume={after}", check=False)
    assert res.returncode != 0 and "its draws ended at generation 6" in res.stderr + res.stdout
    assert (after / "metrics.jsonl").read_text() == before
