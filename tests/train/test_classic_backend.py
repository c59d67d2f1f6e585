"""`python train.py env=<classic-control id>` runs on the native classic backend (envs/classic_env.py): the
same search as on Gymnasium's own environments, and scripts/replay.py, which plays the export in plain
Gymnasium, reproduces the recorded validation return."""

import json

import pytest

from tests.train.helpers import metrics, replay, run_train

pytest.importorskip("gymnasium")
# no refinement: its iterations follow the clock, and the two backends' runs must be the same run
SMALL = ["gp.population_size=16", "gp.elitism=2", "gp.generations=2", "task.validation_episodes=4",
         "task.hall_of_fame=2", "task.refine=false", "progress=false", "wandb.mode=disabled"]


def _policy(run) -> dict:
    record = json.loads((run / "policy.json").read_text())
    return {**record, "meta": {k: v for k, v in record["meta"].items() if k != "backend"}}


def test_a_run_on_the_classic_backend_is_gymnasiums_run_and_replays_exactly(tmp_path):
    res = run_train(tmp_path, "classic", "env=CartPole-v1", *SMALL)
    assert "task policy (CartPole-v1), backend classic" in res.stdout
    run_train(tmp_path, "gymnasium", "env=CartPole-v1", "env.backend=gymnasium", *SMALL)
    # bit for bit the same episodes: the same returns every generation, the same exported policy
    assert metrics(tmp_path / "classic") == metrics(tmp_path / "gymnasium")
    assert _policy(tmp_path / "classic") == _policy(tmp_path / "gymnasium")
    # integer rewards and an argmax: the replay's return is the recorded one exactly
    out = replay(str(tmp_path / "classic"), "--reproduce")
    assert out["backend"] == "gymnasium" and out["mean_return"] == out["recorded_return"]


def test_a_continuous_task_replays_in_gymnasium(tmp_path):
    run_train(tmp_path, "run", "env=Pendulum-v1", *SMALL)
    out = replay(str(tmp_path / "run"), "--reproduce")
    # Gymnasium's float64 rewards against training's float32 ones, NumPy's formulas against torch's trees
    assert out["mean_return"] == pytest.approx(out["recorded_return"], rel=1e-6)
