"""The native MuJoCo backend against Gymnasium's own v5 environments (the independent reference)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium", reason="needs the mujoco extra: pip install -e '.[mujoco]'")
pytest.importorskip("mujoco", reason="needs the mujoco extra: pip install -e '.[mujoco]'")

import gprl.envs as genvs
from gprl.envs.base import VecEnv
from gprl.envs.mujoco_tasks import TASKS

N = 3


def _compare(task: str, steps: int, seed: int, action_scale: float = 1.0) -> None:
    env = genvs.make(task, backend="mujoco", num_envs=N)
    refs = [gym.make(TASKS[task].gym_id) for _ in range(N)]
    obs = env.reset(seed=seed)
    # reset(seed) seeds environment i with seed + i, as gymnasium.vector does
    ref_obs = np.stack([r.reset(seed=seed + i)[0] for i, r in enumerate(refs)])
    np.testing.assert_allclose(obs.numpy(), ref_obs, rtol=1e-6, atol=1e-6)
    low, high = env.action_low.numpy(), env.action_high.numpy()
    rng = np.random.default_rng(seed)
    ours, theirs = np.zeros(N), np.zeros(N)
    ended = np.zeros(N, dtype=bool)
    for _ in range(steps):
        raw = rng.uniform(low, high, size=(N, env.act_dim)).astype(np.float32) * action_scale
        obs, reward, terminated, truncated = env.step(torch.from_numpy(raw))
        clipped = np.clip(raw, low, high)  # our adapter clips; Gymnasium is given the clipped action
        for i, ref in enumerate(refs):
            if ended[i]:
                assert reward[i] == 0.0, "reward after the end of an episode must be masked"
                continue
            o, r, te, tr, _ = ref.step(clipped[i])
            np.testing.assert_allclose(obs[i].numpy(), o, rtol=1e-5, atol=1e-5)
            assert float(reward[i]) == pytest.approx(r, rel=1e-6, abs=1e-6)
            assert bool(terminated[i]) == te and bool(truncated[i]) == (tr and not te)
            theirs[i] += r
            ours[i] += float(reward[i])
            ended[i] = te or tr
        if ended.all():
            break
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    assert np.all(np.abs(theirs) > 0)  # the comparison was not on zeros


@pytest.mark.parametrize("task", ["hopper", "walker2d", "halfcheetah", "swimmer", "ant"])
def test_returns_equal_gymnasium_v5(task: str) -> None:
    _compare(task, steps=1000, seed=11)


@pytest.mark.parametrize("task", ["humanoid", "inverted_pendulum", "inverted_double_pendulum", "reacher"])
def test_other_v5_tasks_equal_gymnasium(task: str) -> None:
    _compare(task, steps=200, seed=5)


def test_out_of_bound_actions_are_clipped_like_gymnasium_sees_them() -> None:
    _compare("hopper", steps=150, seed=3, action_scale=4.0)


def test_set_state_gives_gymnasium_trajectory() -> None:
    """Arbitrary initial states (not from our RNG) give the same trajectory as Gymnasium's set_state."""
    env = genvs.make("walker2d", backend="mujoco", num_envs=2)
    ref = gym.make("Walker2d-v5").unwrapped
    rng = np.random.default_rng(0)
    qpos = ref.init_qpos + rng.uniform(-0.05, 0.05, size=(2, ref.model.nq))
    qvel = rng.normal(size=(2, ref.model.nv)) * 0.1
    env.set_state(qpos, qvel)
    ref.reset(seed=0)
    ref.set_state(qpos[1], qvel[1])
    acts = rng.uniform(-1, 1, size=(50, 2, env.act_dim)).astype(np.float32)
    total, ref_total = 0.0, 0.0
    for a in acts:
        _, r, _te, _ = env.step(torch.from_numpy(a))
        _, rr, rte, _, _ = ref.step(a[1])
        total += float(r[1])
        ref_total += rr
        if rte:
            break
    assert total == pytest.approx(ref_total, rel=1e-6)


@pytest.mark.parametrize("task", ["hopper", "ant"])
def test_numpy_step_equals_the_base_class_step(task: str) -> None:
    """MujocoEnv.step (bookkeeping in NumPy) gives exactly what VecEnv.step (torch bookkeeping) gives."""
    n, horizon = 5, 60
    fast = genvs.make(task, backend="mujoco", num_envs=n, episode_length=horizon)
    ref = genvs.make(task, backend="mujoco", num_envs=n, episode_length=horizon)
    fast.reset(seed=2)
    ref.reset(seed=2)
    gen = torch.Generator().manual_seed(0)
    kept = []
    for t in range(horizon + 3):
        act = torch.rand(n, fast.act_dim, generator=gen) * 3 - 1.5
        act[-1] = 0.0  # stands until the time limit
        if t == 1:
            act[0, 0], act[1, -1], act[2, 0] = float("nan"), float("inf"), -float("inf")
        if t == 2:
            act = act.double()  # converted to float32 first, as the base class does
        out, out_ref = fast.step(act), VecEnv.step(ref, act)
        for x, y in zip(out, out_ref, strict=True):
            assert x.dtype == y.dtype and x.device == y.device
            assert torch.equal(x, y), t
        kept.append((out, [x.clone() for x in out]))
    # some episodes terminated, the others were truncated at the horizon
    assert fast.done.all() and fast._truncated[-1] and (fast._terminated.any() or task != "hopper")
    # a later step never writes into tensors returned earlier
    for out, copy in kept:
        for x, y in zip(out, copy, strict=True):
            assert torch.equal(x, y)


def test_observation_names_read_the_model_joints() -> None:
    """Formulas name observations after the model's joints: a free joint's coordinates and velocities get
    their own suffixes, a hinge its name (position) or ``_vel``; the skipped x/y positions are not named."""
    ant = genvs.make("ant", backend="mujoco", num_envs=1).obs_names
    assert ant[:7] == ["root_z", "root_qw", "root_qx", "root_qy", "root_qz", "hip_1", "ankle_1"]
    assert ant[13:20] == ["root_vx", "root_vy", "root_vz", "root_wx", "root_wy", "root_wz", "hip_1_vel"]
    walker = genvs.make("walker2d", backend="mujoco", num_envs=1).obs_names
    assert walker[:3] == ["rootz", "rooty", "thigh_joint"] and walker[8:11] == ["rootx_vel", "rootz_vel",
                                                                                 "rooty_vel"]
    assert len(walker) == 17 and walker[-1] == "foot_left_joint_vel"
