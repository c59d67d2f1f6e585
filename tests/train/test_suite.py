"""Every task of the control suite (the EvoGP paper's Brax tasks) trains two generations through `train.py` on
native MuJoCo and on Brax (JAX on the CPU), and exports a policy whose formulas name the observations."""

import json

import pytest

from tests.train.helpers import run_train

SUITE = ("swimmer", "hopper", "walker2d", "halfcheetah")


@pytest.mark.parametrize("backend", ["mujoco", "brax"])
@pytest.mark.parametrize("task", SUITE)
def test_two_generations_and_an_export(tmp_path, task, backend):
    pytest.importorskip("brax" if backend == "brax" else "mujoco")
    # small populations and short episodes; on Brax the validation reuses the training batch (one compilation)
    run_train(tmp_path, "run", f"env={task}", f"env.backend={backend}", "gp.population_size=8",
              "gp.elitism=2", "gp.generations=2", "env.episode_length=20", "env.episode_schedule=null",
              "task.hall_of_fame=2", "wandb.mode=disabled", "progress=false")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["generations"] == 2 and summary["stopped_by"] == "generations"
    record = json.loads((tmp_path / "run" / "policy.json").read_text())
    assert record["meta"]["backend"] == backend and len(record["obs_names"]) > 0
    assert not any(name.startswith("obs") for name in record["obs_names"])  # joint names on both backends


def test_brax_ant_exports_the_joints_it_reads_and_drives(tmp_path):
    """Brax's ant lays its observation out unlike Gymnasium's: the names are read off its model by value."""
    pytest.importorskip("brax")
    run_train(tmp_path, "run", "env=ant", "env.backend=brax", "gp.population_size=8", "gp.elitism=2",
              "gp.generations=2", "env.episode_length=20", "env.episode_schedule=null", "task.hall_of_fame=2",
              "wandb.mode=disabled", "progress=false")
    record = json.loads((tmp_path / "run" / "policy.json").read_text())
    assert record["obs_names"][:6] == ["root_z", "root_qw", "root_qx", "root_qy", "root_qz", "hip_1"]
    assert record["obs_names"][-1] == "ankle_4_vel" and len(record["obs_names"]) == 27
    assert record["action_names"][:2] == ["hip_4", "ankle_4"]
