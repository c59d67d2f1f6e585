"""gp.islands: the metrics give each island's best fitness, so a run of independent islands shows which
search leads (in metrics.jsonl and in W&B)."""

import json

import pytest

from tests.train.helpers import metrics, train, wandb_records

pytest.importorskip("mujoco")

# no racing and no reward shift: the fitness is each tree's return on the generation's full episodes
PLAIN = ["gp.generations=3", "env.racing={horizon: 1}", "env.reward_shift=0"]


def test_each_island_reports_its_best(tmp_path):
    train(tmp_path, "islands", *PLAIN, "gp.islands=3", "gp.migrants=0", "wandb.mode=offline")
    rows = metrics(tmp_path / "islands")
    for r in rows:
        best = r["island_best_fitness"]
        assert len(best) == 3
        assert max(best) == pytest.approx(r["best_return"], rel=1e-6)  # the generation's best is in one
    assert any(len(set(r["island_best_fitness"])) > 1 for r in rows)  # each its own, not the overall best
    (run_file,) = (tmp_path / "islands" / "wandb").glob("offline-run-*/run-*.wandb")
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
               for rec in wandb_records(run_file) if rec.WhichOneof("record_type") == "history"]
    assert [h["island_best_fitness"] for h in history] == [r["island_best_fitness"] for r in rows]
    train(tmp_path, "one", *PLAIN, "wandb.mode=disabled")
    assert all("island_best_fitness" not in r for r in metrics(tmp_path / "one"))
