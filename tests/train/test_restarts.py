"""gp.restarts: the search runs again from fresh random populations, each run an equal share of the budget;
the evolution strategy does not read a fresh population as its pairs; a resumed run restarts where the
uninterrupted one did."""

import shutil
from types import SimpleNamespace

import pytest
import torch

import gprl
from gprl.train.trainer import make_gp
from tests.train.helpers import assert_same_final_population, metrics, train

pytest.importorskip("mujoco")

RUNS = ["gp.generations=6", "gp.restarts=3", "checkpoint_every=1", "keep_checkpoints=10",
        "wandb.mode=disabled"]


def same(a: gprl.Population, b: gprl.Population) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))


def test_restart_draws_another_population_and_hides_no_strategy_rows():
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


def test_restarts_split_the_generations_and_resume_where_they_were(tmp_path):
    res = train(tmp_path, "full", *RUNS)
    assert "in 3 runs from fresh populations" in res.stdout
    full = tmp_path / "full"
    ckpt = {g: torch.load(full / "checkpoints" / f"gen_{g:06d}.pt", weights_only=False) for g in range(1, 7)}
    gp_cfg = dict(ckpt[1]["config"]["gp"], population_size=12, max_len=int(ckpt[1]["fingerprint"]["max_len"]))
    task = SimpleNamespace(n_in=11, n_out=3, maximize=True, device="cpu")
    gp = make_gp(gp_cfg, task, 0)
    # 6 generations in 3 runs: generations 2 and 4 start from fresh populations, the others are varied
    for g in range(1, 7):
        state = ckpt[g]["population"]
        pop = gprl.Population(*(state[k] for k in ("kind", "code", "out", "value", "size")), n_in=11, n_out=3)
        assert same(pop, gp.init(run=g)) == (g in (2, 4)), g
        assert ckpt[g]["restart"] == ((0, 0) if g < 2 else (1, 2) if g < 4 else (2, 4))
    # a run resumed from generation 3 (inside the second run) restarts at 4 as the uninterrupted one did
    resumed = tmp_path / "resumed"
    shutil.copytree(full, resumed)
    for g in range(4, 7):
        (resumed / "checkpoints" / f"gen_{g:06d}.pt").unlink()
    (resumed / "summary.json").unlink()
    train(tmp_path, "resumer", *RUNS, f"resume={resumed}")
    assert metrics(full) == metrics(resumed)
    assert_same_final_population(full, resumed, "gen_000006.pt")


@pytest.mark.parametrize("bad", ["0", "1.5", "true"])
def test_bad_restarts_is_named(tmp_path, bad):
    res = train(tmp_path, "bad", "gp.generations=2", "wandb.mode=disabled", f"gp.restarts={bad}", check=False)
    assert res.returncode != 0 and "gp.restarts" in res.stderr
