"""`python train.py env=<name>` for names without a preset: a registered Gymnasium id, a user's own
environment class by its entry point, Dict/Tuple observations and MultiDiscrete actions, end to end to the
replayed export."""

import json

import pytest
from omegaconf import OmegaConf

from tests.train.helpers import metrics, replay, run_train

pytest.importorskip("gymnasium")
SMALL = ["gp.population_size=16", "gp.elitism=2", "task.validation_episodes=4", "task.hall_of_fame=2",
         "progress=false", "wandb.mode=disabled"]


def test_a_registered_id_trains_on_its_own_episode_length(tmp_path):
    res = run_train(tmp_path, "run", "env=Pendulum-v1", "gp.generations=2", *SMALL)
    assert "task policy (Pendulum-v1), backend classic" in res.stdout  # Gymnasium's task, batched natively
    assert "episode length 200" in res.stdout  # Pendulum-v1's own limit, not a preset's
    assert OmegaConf.load(tmp_path / "run" / "config.yaml").env.episode_length == 200
    assert [m["episode_length"] for m in metrics(tmp_path / "run")] == [200, 200]
    names = json.loads((tmp_path / "run" / "policy.json").read_text())["obs_names"]
    assert names == ["cos_theta", "sin_theta", "theta_dot"]


def test_a_users_environment_class_by_its_entry_point(tmp_path):
    # PointMass (tests/envs/custom.py): a Dict observation, no time limit of its own
    res = run_train(tmp_path, "run", "env=tests.envs.custom:PointMass", "env.episode_length=40",
                    "gp.generations=2", *SMALL)
    record = json.loads((tmp_path / "run" / "policy.json").read_text())
    assert record["obs_names"] == ["position_0", "position_1", "velocity_0", "velocity_1"]
    assert record["meta"]["env"] == "tests.envs.custom:PointMass" and "a0 = " in res.stdout
    # the NumPy-only policy.py replays in plain Gymnasium, the recorded validation episodes exactly
    out = replay(str(tmp_path / "run"), "--reproduce")
    assert out["mean_return"] == pytest.approx(out["recorded_return"], rel=1e-6)
    assert replay(str(tmp_path / "run"), "--episodes", "2")["episode_length"] == 40


def test_multidiscrete_actions_and_tuple_observations(tmp_path):
    run_train(tmp_path, "run", "env=tests.envs.custom:Switches", "env.episode_length=8", "gp.generations=3",
              *SMALL)
    record = json.loads((tmp_path / "run" / "policy.json").read_text())
    assert record["action"]["segments"] == [2, 2, 2]
    assert record["action_names"] == ["a0_0", "a0_1", "a1_0", "a1_1", "a2_0", "a2_1"]
    out = replay(str(tmp_path / "run"), "--reproduce")
    assert out["mean_return"] == pytest.approx(out["recorded_return"], rel=1e-6)


def test_an_image_observation_is_refused_with_the_space_named():
    import gprl.envs as genvs

    pytest.importorskip("Box2D")
    with pytest.raises(TypeError, match=r"observation space Box\(0, 255, \(96, 96, 3\), uint8\) looks "
                                        "like an image, which a formula cannot read"):
        genvs.make("CarRacing-v3", num_envs=1)


@pytest.mark.parametrize("name, message", [
    ("Pendulm-v1", "unknown task 'Pendulm-v1' for any installed backend. Did you mean Pendulum-v1"),
    ("tests.envs.custom:Nope", "has no environment id, class or factory named 'Nope'"),
    ("tests.envs.custom:PointMass", "has no time limit of its own: set one (env.episode_length=N"),
])
def test_a_wrong_name_gets_one_line(tmp_path, name, message):
    res = run_train(tmp_path, "run", f"env={name}", "gp.generations=1", *SMALL, check=False)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert message in res.stderr.strip().splitlines()[-1]


def test_evolve_policy_from_python_takes_a_class_or_a_factory(tmp_path):
    import numpy as np

    import gprl
    from tests.envs.custom import PointMass

    small = {"task.validation_episodes": 3, "task.hall_of_fame": 2, "gp.elitism": 2}
    policy = gprl.evolve_policy(PointMass, generations=2, population_size=16, episode_length=30,
                                run_dir=tmp_path / "by_class", overrides=small)
    # an importable class runs under its entry point: the run can be replayed and resumed elsewhere
    assert policy.record["meta"]["env"] == "tests.envs.custom:PointMass"
    assert set(policy.formulas) == {"a0", "a1"} and np.isfinite(policy.validation_return)
    action = policy.act(np.zeros(4))
    assert action.shape == (2,) and np.all(np.abs(action) <= 1)
    saved = policy.save(tmp_path / "saved")
    assert sorted(p.name for p in (tmp_path / "saved").iterdir()) == sorted(
        f"policy.{k}" for k in ("json", "py", "tex", "txt")) and len(saved) == 4
    # a factory (not importable by name) is registered in this process
    lam = gprl.evolve_policy(lambda: PointMass(), generations=1, population_size=16, episode_length=30,
                             run_dir=tmp_path / "by_factory", overrides=small)
    assert lam.record["meta"]["env"].startswith("gprl/_lambda_-v")
