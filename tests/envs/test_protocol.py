"""The VecEnv protocol on the CPU backends (Gymnasium, native MuJoCo) and the rollout helper."""

from __future__ import annotations

import builtins
import importlib

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium", reason="needs the gymnasium extra: pip install -e '.[gymnasium]'")
pytest.importorskip("mujoco", reason="needs the mujoco extra: pip install -e '.[mujoco]'")

import gprl.envs as genvs


def _check_protocol(env: genvs.VecEnv, n: int) -> None:
    assert env.num_envs == n
    obs = env.reset(seed=1)
    assert obs.shape == (n, env.obs_dim) and obs.dtype == torch.float32 and obs.device == env.device
    if env.discrete:
        assert env.action_low is None and env.num_actions == env.act_dim
        action = torch.randn(n, env.num_actions)
    else:
        assert env.action_low.shape == (env.act_dim,) and env.action_low.dtype == torch.float32
        action = torch.rand(n, env.act_dim) * (env.action_high - env.action_low) + env.action_low
    obs, reward, terminated, truncated = env.step(action)
    assert obs.shape == (n, env.obs_dim) and obs.dtype == torch.float32
    assert reward.shape == (n,) and reward.dtype == torch.float32
    assert terminated.shape == truncated.shape == (n,)
    assert terminated.dtype == truncated.dtype == torch.bool
    if env.obs_names is not None:
        assert len(env.obs_names) == env.obs_dim and len(set(env.obs_names)) == env.obs_dim


@pytest.mark.parametrize(
    "name,backend",
    [("CartPole-v1", "gymnasium"), ("Pendulum-v1", "gymnasium"), ("MountainCarContinuous-v0", "gymnasium"),
     ("Acrobot-v1", "gymnasium"), ("FrozenLake-v1", "gymnasium"), ("hopper", "gymnasium"),
     ("hopper", "mujoco"), ("ant", "mujoco"), ("Reacher-v5", "mujoco"), ("CartPole-v1", "classic"),
     ("Pendulum-v1", "classic"), ("MountainCar-v0", "classic"), ("MountainCarContinuous-v0", "classic"),
     ("Acrobot-v1", "classic")],
)  # fmt: skip
def test_protocol_shapes_dtypes_devices(name: str, backend: str) -> None:
    with genvs.make(name, backend=backend, num_envs=3) as env:
        _check_protocol(env, 3)


def test_classic_control_obs_names_and_spaces() -> None:
    env = genvs.make("CartPole-v1", backend="gymnasium", num_envs=2)
    assert env.backend == "gymnasium" and env.discrete and env.num_actions == 2
    assert env.obs_names == ["cart_position", "cart_velocity", "pole_angle", "pole_angular_velocity"]
    env = genvs.make("Pendulum-v1", backend="gymnasium", num_envs=2)
    assert not env.discrete and env.act_dim == 1 and float(env.action_high[0]) == 2.0
    env = genvs.make("FrozenLake-v1", num_envs=2)  # Discrete observations are one-hot
    obs = env.reset(seed=0)
    assert env.obs_dim == 16 and torch.equal(obs.sum(1), torch.ones(2))


def test_discrete_actions_take_the_argmax() -> None:
    """CartPole through our adapter equals Gymnasium driven with argmax(scores) directly."""
    env = genvs.make("CartPole-v1", backend="gymnasium", num_envs=4, seed=0)
    ref = gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync")
    obs = env.reset(seed=7)
    ref_obs, _ = ref.reset(seed=7)
    np.testing.assert_allclose(obs.numpy(), ref_obs, rtol=1e-6)
    rng = np.random.default_rng(0)
    for _ in range(8):
        scores = torch.from_numpy(rng.normal(size=(4, 2)).astype(np.float32))
        obs, _r, _te, _ = env.step(scores)
        ref_obs, _rr, rte, _, _ = ref.step(scores.argmax(1).numpy())
        np.testing.assert_allclose(obs.numpy()[~rte], ref_obs[~rte], rtol=1e-6)
    # integer indices are accepted too
    env.reset(seed=7)
    obs_i, *_ = env.step(torch.tensor([1, 0, 1, 1]))
    env.reset(seed=7)
    obs_s, *_ = env.step(torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]))
    assert torch.equal(obs_i, obs_s)


@pytest.mark.parametrize("backend", ["mujoco", "gymnasium"])
def test_same_seed_same_returns(backend: str) -> None:
    def returns(seed: int) -> torch.Tensor:
        env = genvs.make("hopper", backend=backend, num_envs=4)
        gen = torch.Generator().manual_seed(0)
        policy = lambda o: torch.tanh(o[..., :3] * torch.randn(3, generator=gen))
        return genvs.rollout(env, policy, 2, 2, max_steps=100, seed=seed).returns

    a, b, c = returns(3), returns(3), returns(4)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


@pytest.mark.parametrize("workers", [0, 2])
def test_gymnasium_steps_the_live_episodes_as_gymnasium_vector_does(workers: int) -> None:
    """In this process or in worker processes, the live episodes are Gymnasium's own (sync vector env, same
    seeds and actions), step for step; an ended episode's sub-environment is not stepped again."""
    n = 12
    env = genvs.make("CartPole-v1", backend="gymnasium", num_envs=n, workers=workers)
    ref = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync")
    assert env.workers == workers
    obs, (ref_obs, _) = env.reset(seed=3), ref.reset(seed=3)
    np.testing.assert_array_equal(obs.numpy(), ref_obs)
    rng, done, ret, ref_ret = np.random.default_rng(1), np.zeros(n, bool), np.zeros(n), np.zeros(n)
    for _ in range(20):
        scores = rng.normal(size=(n, 2)).astype(np.float32)
        obs, reward, terminated, truncated = env.step(torch.from_numpy(scores))
        ref_obs, ref_reward, ref_term, ref_trunc, _ = ref.step(scores.argmax(1))
        np.testing.assert_array_equal(obs.numpy()[~done], ref_obs[~done])
        ret += reward.numpy()
        ref_ret += np.where(done, 0.0, ref_reward)
        done |= ref_term | ref_trunc
        np.testing.assert_array_equal((terminated | truncated).numpy(), done)
    assert 0 < done.sum() < n  # some episodes ended along the way, others went on
    np.testing.assert_array_equal(ret, ref_ret)
    if not workers:  # an ended episode's simulator stands still
        frozen = [tuple(e.unwrapped.state) for e in env.envs.envs]
        env.step(torch.zeros(n, 2))
        assert [tuple(e.unwrapped.state) == s for e, s in zip(env.envs.envs, frozen)] == list(done)
    env.close()


def test_gymnasium_workers_argument_and_a_failing_worker() -> None:
    with pytest.raises(ValueError, match="workers must be a non-negative int"):
        genvs.make("CartPole-v1", backend="gymnasium", num_envs=4, workers=-1)
    assert genvs.make("CartPole-v1", backend="gymnasium", num_envs=4).workers == 0  # too few to split
    env = genvs.make("tests.envs.custom:Faulty", backend="gymnasium", num_envs=4, workers=2, episode_length=5)
    env.reset(seed=0)
    env.step(torch.zeros(4, 2))
    env.step(torch.zeros(4, 2))
    with pytest.raises(RuntimeError, match="a Gymnasium worker process failed: FloatingPointError: the "
                                           "simulation diverged"):
        env.step(torch.zeros(4, 2))
    env = genvs.make("tests.envs.custom:PointMass", backend="gymnasium", num_envs=4, workers=2,
                     episode_length=5)
    env.reset(seed=0)
    env.envs.procs[1].kill()  # as the OOM killer would: no traceback comes back
    env.envs.procs[1].join()
    with pytest.raises(RuntimeError, match=r"a Gymnasium worker process died \(exit codes \[-9\]\)"):
        env.step(torch.zeros(4, 2))
    env.close()


@pytest.mark.parametrize("backend", ["mujoco", "gymnasium"])
def test_a_shard_of_the_batch_replays_its_environments(backend: str) -> None:
    """reset(seed) starts environment i from seed + i: environments [2, 5) of a batch of 5 are a batch of 3
    reset with seed + 2, step for step (what a distributed run relies on)."""
    whole = genvs.make("hopper", backend=backend, num_envs=5)
    part = genvs.make("hopper", backend=backend, num_envs=3)
    a, b = whole.reset(seed=11), part.reset(seed=13)
    assert torch.equal(a[2:], b)
    action = torch.linspace(-1, 1, 15).reshape(5, 3)
    for _ in range(5):
        a, ra, *_ = whole.step(action)
        b, rb, *_ = part.step(action[2:])
    assert torch.equal(a[2:], b) and torch.equal(ra[2:], rb)


@pytest.mark.parametrize("name,backend", [("hopper", "mujoco"), ("hopper", "gymnasium"),
                                          ("Pendulum-v1", "classic")])
def test_common_starts_repeat_the_first_starts_along_the_batch(name: str, backend: str) -> None:
    """reset(seed, starts=k) starts environment i as reset(seed) starts environment i % k (common random
    numbers for a batch laid out p * k + e), and its episodes go on as those would."""
    common = genvs.make(name, backend=backend, num_envs=6)
    own = genvs.make(name, backend=backend, num_envs=6)
    a, b = common.reset(seed=5, starts=3), own.reset(seed=5)
    assert torch.equal(a, b[[0, 1, 2, 0, 1, 2]]) and not torch.equal(a, b)
    action = torch.linspace(-1, 1, 6 * common.act_dim).reshape(6, common.act_dim)
    action[3:] = action[:3]  # the repeated starts take the same actions: the same episodes
    for _ in range(5):
        a, ra, *_ = common.step(action)
    assert torch.equal(a[:3], a[3:]) and torch.equal(ra[:3], ra[3:])
    with pytest.raises(ValueError, match="starts must be a positive int given with a seed"):
        common.reset(starts=3)
    common.common_starts = False  # as on Genesis, whose batch draws its starts from one generator
    with pytest.raises(ValueError, match="has no common starts"):
        common.reset(seed=5, starts=3)


def test_rollout_with_common_starts_plays_every_individual_on_the_same_starts() -> None:
    env = genvs.make("Pendulum-v1", backend="classic", num_envs=6)
    res = genvs.rollout(env, lambda o: torch.zeros(*o.shape[:-1], 1), 3, 2, max_steps=20, seed=9,
                        common_starts=True)
    assert torch.equal(res.returns[0], res.returns[1]) and torch.equal(res.returns[0], res.returns[2])
    assert res.returns[0, 0] != res.returns[0, 1]


def test_mujoco_and_gymnasium_backends_agree() -> None:
    """The same seed gives the same initial states on both backends (Gymnasium's per-environment seeding)."""
    a = genvs.make("halfcheetah", backend="mujoco", num_envs=3).reset(seed=9)
    b = genvs.make("halfcheetah", backend="gymnasium", num_envs=3).reset(seed=9)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)


def test_action_bounds_are_enforced() -> None:
    env = genvs.make("Pendulum-v1", num_envs=2)
    ref = genvs.make("Pendulum-v1", num_envs=2)
    env.reset(seed=0)
    ref.reset(seed=0)
    big = torch.tensor([[50.0], [-float("inf")]])
    _, r1, *_ = env.step(big)
    _, r2, *_ = ref.step(torch.tensor([[2.0], [-2.0]]))
    assert torch.equal(r1, r2)
    env.reset(seed=0)
    ref.reset(seed=0)
    _, r1, *_ = env.step(torch.tensor([[float("nan")], [0.0]]))  # NaN → 0
    _, r2, *_ = ref.step(torch.zeros(2, 1))
    assert torch.equal(r1, r2)


def test_masking_after_termination() -> None:
    """After an episode ends: flags stay set, reward is 0, the others go on; no hidden reset reaches us."""
    env = genvs.make("hopper", backend="mujoco", num_envs=2, episode_length=300)
    env.reset(seed=0)
    push = torch.tensor([[1.0, -1.0, 1.0], [0.0, 0.0, 0.0]])  # env 0 falls quickly, env 1 stands longer
    t_end = None
    for t in range(300):
        obs, r, te, tr = env.step(push)
        if te[0] and t_end is None:
            t_end, obs_end = t, obs[0].clone()
        elif t_end is not None:
            assert te[0] and r[0] == 0.0
            assert torch.equal(obs[0], obs_end)  # ended simulations are not stepped any more
        if te.all() or tr.all():
            break
    assert t_end is not None and t_end < 100
    assert env.done[0]
    # the CPU Gymnasium backend: CartPole episodes end and stay ended (NEXT_STEP autoreset is hidden)
    env = genvs.make("CartPole-v1", num_envs=2, episode_length=50)
    env.reset(seed=0)
    for t in range(60):
        _, r, te, tr = env.step(torch.tensor([[1.0, 0.0], [1.0, 0.0]]))
        if t >= 49:
            assert (te | tr).all()
        if t > 49:
            assert torch.equal(r, torch.zeros(2))


def test_truncation_at_episode_length() -> None:
    env = genvs.make("halfcheetah", backend="mujoco", num_envs=2, episode_length=5)
    env.reset()
    for t in range(5):
        _, _, te, tr = env.step(torch.zeros(2, 6))
        assert not te.any()
        assert bool(tr.all()) == (t == 4)


def test_rollout_masks_and_stops_early() -> None:
    p, e = 3, 2
    env = genvs.make("hopper", backend="mujoco", num_envs=p * e)
    calls = []

    def policy(obs: torch.Tensor) -> torch.Tensor:
        assert obs.shape == (p, e, env.obs_dim)
        calls.append(1)
        # individual 0 pushes hard (falls fast), others do nothing
        out = torch.zeros(p, e, env.act_dim)
        out[0] = torch.tensor([1.0, -1.0, 1.0])
        return out

    res = genvs.rollout(env, policy, p, e, check_every=8)
    assert res.returns.shape == (p, e) and res.mean_return.shape == (p,)
    assert res.lengths.max() < env.episode_length  # every hopper falls without control
    assert res.steps == len(calls) and res.steps % 8 == 0 and res.steps - 8 < res.lengths.max() <= res.steps
    assert res.lengths[0].max() < res.lengths[1:].min()
    # independent check: step a single environment by hand and sum rewards until it ends
    ref = genvs.make("hopper", backend="mujoco", num_envs=p * e)
    ref.reset(seed=0)
    total, n = 0.0, 0
    while True:
        _, r, te, tr = ref.step(policy(torch.zeros(p, e, env.obs_dim)).reshape(p * e, -1))
        total, n = total + float(r[0]), n + 1
        if te[0] or tr[0]:
            break
    assert res.returns[0, 0].item() == pytest.approx(total, rel=1e-6) and res.lengths[0, 0] == n


def test_rollout_discrete() -> None:
    env = genvs.make("CartPole-v1", num_envs=4)
    # a hand-written balancing rule versus always-left
    good = lambda o: torch.stack([-(o[..., 2] + o[..., 3]), o[..., 2] + o[..., 3]], -1)
    res = genvs.rollout(env, good, 4, 1, seed=0)
    env2 = genvs.make("CartPole-v1", num_envs=4)
    res2 = genvs.rollout(
        env2, lambda o: torch.stack([torch.ones_like(o[..., 0]), torch.zeros_like(o[..., 0])], -1), 4, 1
    )
    assert res.mean_return.min() > 100 and res2.mean_return.max() < 20
    assert torch.equal(res.returns.squeeze(1), res.lengths.squeeze(1).double())  # +1 per step


def test_bad_actions_raise_clear_errors() -> None:
    env = genvs.make("hopper", backend="mujoco", num_envs=2)
    env.reset()
    with pytest.raises(ValueError, match="action must have shape"):
        env.step(torch.zeros(2, 4))
    with pytest.raises(TypeError, match="action must be a floating-point"):
        env.step(torch.zeros(2, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match="action must be a torch.Tensor"):
        env.step(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="action is on meta"):
        env.step(torch.zeros(2, 3, device="meta"))
    denv = genvs.make("CartPole-v1", num_envs=2)
    denv.reset()
    with pytest.raises(ValueError, match="num_actions"):
        denv.step(torch.zeros(2, 3))
    with pytest.raises(RuntimeError, match="before reset"):
        genvs.make("hopper", backend="mujoco", num_envs=1).step(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="num_individuals"):
        genvs.rollout(env, lambda o: o, 3, 1)


def test_unknown_task_and_backend_list_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown task 'hoper'.*Did you mean hopper"):
        genvs.make("hoper")
    with pytest.raises(ValueError, match=r"unknown backend 'bullet'; choose one of \['auto', 'gymnasium'"):
        genvs.make("hopper", backend="bullet")
    with pytest.raises(ValueError, match=r"unknown task 'CartPole-v1' for backend 'mujoco'.*hopper"):
        genvs.make("CartPole-v1", backend="mujoco")
    with pytest.raises(TypeError, match=r"unknown keyword argument.*ctrl_cost_weight"):
        genvs.make("hopper", backend="mujoco", ctrl_cost=1.0)
    assert "walker2d" in genvs.task_names("mujoco") and "CartPole-v1" in genvs.task_names("gymnasium")


def test_missing_optional_dependency_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_sim(name: str, *args: object, **kwargs: object) -> object:
        if name.split(".")[0] in ("mujoco", "brax", "genesis"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sim)
    monkeypatch.setattr(importlib, "import_module", lambda name, *a: no_sim(name))
    for backend, task in [("mujoco", "hopper"), ("brax", "hopper"), ("genesis", "go2_walk")]:
        with pytest.raises(ImportError, match=rf'pip install -e "\.\[{backend}\]"'):
            genvs.make(task, backend=backend)


# ---------------------------------------------------------------------------------------------- GPU only
@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["mujoco", "gymnasium"])
def test_cpu_simulators_hand_over_tensors_on_cuda(backend: str) -> None:
    """device="cuda" (no index) is the device tensors report,
    so the policy's actions pass the device check."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    env = genvs.make("hopper", backend=backend, num_envs=4, device="cuda", seed=0)
    assert env.device == torch.device("cuda", torch.cuda.current_device())
    res = genvs.rollout(env, lambda o: torch.zeros(4, 1, env.act_dim, device=o.device), 4, max_steps=5,
                        seed=0)
    assert res.returns.is_cuda and res.returns.shape == (4, 1)


def test_gymnasium_mujoco_ids_run_on_the_native_backend() -> None:
    # the same task bit for bit (tests/envs/test_mujoco_equivalence.py), without Gymnasium's per-env loop
    assert genvs.auto_backend("Hopper-v5") == "mujoco" and genvs.auto_backend("Ant-v5") == "mujoco"
    assert genvs.auto_backend("Hopper-v4") == "gymnasium"  # only the v5 tasks are native
    assert genvs.make("InvertedDoublePendulum-v5", num_envs=1).backend == "mujoco"


def test_several_discrete_choices_take_an_argmax_each() -> None:
    env = genvs.make("tests.envs.custom:Switches", num_envs=2, episode_length=8)
    assert env.action_segments == [2, 2, 2] and env.num_actions == 6
    scores = torch.tensor([[0.0, 1.0, 2.0, -1.0, float("nan"), 3.0], [5.0, 4.0, 0.0, 0.0, 1.0, -1.0]])
    assert env.prepare_action(scores).tolist() == [[1, 0, 1], [0, 0, 0]]  # NaN never wins; ties: the first
    assert env.prepare_action(torch.tensor([[1, 0, 1], [0, 1, 1]])).tolist() == [[1, 0, 1], [0, 1, 1]]
    with pytest.raises(ValueError, match=r"integer action must have shape \[2, 3\]"):
        env.prepare_action(torch.tensor([1, 0]))
    target = env.reset(0)[:, :3]  # the switches' targets: reward 3 for setting them all
    _, reward, _, _ = env.step(target.long())
    assert reward.tolist() == [3.0, 3.0]
