"""Genesis backend on its CPU backend: protocol, seeding, masking, and Genesis' own tensors (no copies)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

pytest.importorskip("genesis", reason="needs the genesis extra: pip install -e '.[genesis]'")

import gprl.envs as genvs


@pytest.fixture(scope="module")
def go2() -> genvs.VecEnv:
    return genvs.make("go2_walk", backend="genesis", num_envs=4, device="cpu")


@pytest.fixture(scope="module")
def cartpole() -> genvs.VecEnv:
    return genvs.make("cartpole_balance", backend="genesis", num_envs=4, device="cpu")


def test_go2_protocol(go2: genvs.VecEnv) -> None:
    obs = go2.reset(seed=0)
    assert obs.shape == (4, 45) and obs.dtype == torch.float32 and obs.device == go2.device
    assert go2.act_dim == 12 and len(go2.obs_names) == 45 and go2.episode_length == 1000
    # at the default pose: gravity points down in the body frame, joint offsets and last actions are 0
    torch.testing.assert_close(obs[:, 3:6], torch.tensor([0.0, 0.0, -1.0]).expand(4, 3), atol=1e-4, rtol=0)
    assert torch.equal(obs[:, 9:21], torch.zeros(4, 12)) and torch.equal(obs[:, 33:], torch.zeros(4, 12))
    torch.testing.assert_close(obs[:, 6], torch.full((4,), 0.5 * 2.0))  # command 0.5 m/s, scaled by 2
    obs, r, te, _tr = go2.step(torch.zeros(4, 12))
    assert r.shape == (4,) and r.dtype == torch.float32 and te.dtype == torch.bool


def test_go2_seeding_and_termination(go2: genvs.VecEnv) -> None:
    policy = lambda o: 0.5 * torch.sin(o[..., 9:21] * 7.0 + 1.0)
    a = genvs.rollout(go2, policy, 2, 2, max_steps=40, seed=3)
    b = genvs.rollout(go2, policy, 2, 2, max_steps=40, seed=3)
    assert torch.equal(a.returns, b.returns)
    # a violent policy tips the robot over: terminated by roll/pitch, then masked
    go2.reset(seed=0)
    ended = torch.zeros(4, dtype=torch.bool)
    for t in range(100):
        _, r, te, _ = go2.step(torch.tensor([[100.0, -100.0, 100.0] * 4] * 4))
        assert torch.equal(r[ended], torch.zeros(int(ended.sum())))
        ended |= te
    assert ended.all()


def test_go2_commands_follow_the_seed(go2: genvs.VecEnv) -> None:
    """Velocity commands are drawn on the simulator's device from the episode's seed."""
    span = go2.task.command_span
    go2.task.command_span = torch.tensor([1.0, 0.0, 0.0])  # x velocity command uniform in [0.5, 1.5)
    try:
        first, again, other = (go2.reset(seed=s)[:, 6].clone() for s in (1, 1, 2))
    finally:
        go2.task.command_span = span
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert len(set(first.tolist())) == 4 and ((first >= 1.0) & (first < 3.0)).all()  # scaled by 2


def test_genesis_own_tensors_no_copy(go2: genvs.VecEnv) -> None:
    """The joint state the observation is made from is a live view of Genesis' buffers, not a copy."""
    import genesis as gs

    assert gs.use_zerocopy
    go2.reset(seed=0)
    view = go2.task.pos_view
    ptr = view.data_ptr()
    before = view.clone()
    obs, *_ = go2.step(torch.full((4, 12), 0.5))
    obs, *_ = go2.step(torch.full((4, 12), 0.5))
    assert view.data_ptr() == ptr and not torch.equal(view, before)  # same storage, updated by Genesis
    torch.testing.assert_close(view, go2.task.robot.get_dofs_position())
    pos, _ = go2.dof_state()
    torch.testing.assert_close(obs[:, 9:21], pos - go2.task.default_dof_pos)
    # the base's pose and velocities, read from Genesis' link buffers, are what its getters give
    r = go2.task.robot
    assert go2.task.link_views is not None
    for ours, genesis in zip(go2.task.base_state(), (r.get_pos(), r.get_quat(), r.get_vel(), r.get_ang())):
        torch.testing.assert_close(ours, genesis)


def test_go2_action_latency(go2: genvs.VecEnv) -> None:
    """The robot executes the previous step's clipped action (PD targets around the default pose); the
    observation ends with this step's clipped action."""
    task = go2.task
    go2.reset(seed=0)
    first = torch.linspace(-150.0, 150.0, 48).reshape(4, 12)  # past the ±100 clip at both ends
    first[0, 0] = float("nan")
    clipped = torch.nan_to_num(first, nan=0.0).clamp(-100.0, 100.0)
    obs, *_ = go2.step(first)
    assert torch.equal(obs[:, 33:], clipped) and torch.equal(task.last_actions, clipped)
    assert torch.equal(task.targets, clipped * 0.25 + task.default_dof_pos)  # the next step's
    executed = []
    physics = task.physics
    task.physics = lambda: (executed.append(task.targets.clone()), physics())  # type: ignore[method-assign]
    try:
        obs, *_ = go2.step(torch.zeros(4, 12))
    finally:
        del task.physics
    assert torch.equal(executed[0], clipped * 0.25 + task.default_dof_pos)
    assert torch.equal(obs[:, 33:], torch.zeros(4, 12))


def test_go2_pd_targets_go_straight_into_genesis(go2: genvs.VecEnv) -> None:
    """The step writes the PD targets into Genesis' own control buffer (zero-copy) instead of calling
    robot.control_dofs_position every step: the same episodes, bit for bit, as through Genesis' API."""
    task = go2.task
    assert task.ctrl_pos is not None

    def episodes() -> list[torch.Tensor]:
        obs, out = go2.reset(seed=5), []
        for _ in range(30):
            obs, reward, terminated, _ = go2.step(0.5 * torch.sin(obs[:, 9:21] * 7.0 + 1.0))
            out += [obs, reward, terminated]
        return out

    direct = episodes()
    assert torch.equal(task.ctrl_pos[:, task.dof_index], task.targets)
    view, task.ctrl_pos = task.ctrl_pos, None
    try:
        through_api = episodes()
    finally:
        task.ctrl_pos = view
    assert all(torch.equal(a, b) for a, b in zip(direct, through_api, strict=True))


def test_fused_step_equals_the_base_class_path() -> None:
    """GenesisEnv.step (the phases with the episode rules on the device) gives what VecEnv.step gives with the
    task's ops one by one: the same outputs bit for bit, NaN and out-of-bound actions, termination masking
    and truncation at the episode length included; the outputs are fresh tensors."""
    fused, base = (genvs.make("cartpole_balance", backend="genesis", num_envs=4, device="cpu",
                              episode_length=30)
                   for _ in range(2))  # fmt: skip
    gen = torch.Generator().manual_seed(0)
    push = torch.tensor([[3.0], [-3.0], [0.0], [0.0]])  # the first two fall, the others reach the time limit
    for episode in range(2):
        assert torch.equal(fused.reset(seed=episode), base.reset(seed=episode))
        kept = None
        for t in range(35):
            action = push + (torch.rand(4, 1, generator=gen) * 2 - 1) * 0.1
            action[t % 4, 0] = (float("nan"), float("inf"), -float("inf"), 0.5)[t % 4]
            got, want = fused.step(action), genvs.VecEnv.step(base, action)
            for x, y in zip(got, want, strict=True):
                assert x.dtype == y.dtype and torch.equal(x, y), (episode, t)
            assert torch.equal(fused.done, base.done)
            if t == 0:
                kept = [x.clone() for x in got], got
        terminated, truncated = got[2], got[3]
        assert terminated.any() and truncated.any() and (terminated ^ truncated).all()
        for copy, tensor in zip(*kept, strict=True):  # not rewritten by the later steps
            assert torch.equal(copy, tensor)


def test_cartpole_classic(cartpole: genvs.VecEnv) -> None:
    obs = cartpole.reset(seed=1)
    assert obs.shape == (4, 4) and obs.abs().max() <= 0.05
    # pushing toward the side the pole leans on keeps it up longer than doing nothing
    balance = lambda o: torch.clamp(10 * o[..., 1:2] + 2 * o[..., 3:4], -1, 1)
    idle = lambda o: torch.zeros_like(o[..., :1])
    good = genvs.rollout(cartpole, balance, 4, 1, max_steps=300, seed=1)
    bad = genvs.rollout(cartpole, idle, 4, 1, max_steps=300, seed=1)
    assert torch.equal(bad.returns, bad.lengths.double()) and (bad.lengths < 300).all()
    assert good.mean_return.mean() > bad.mean_return.mean()


def test_bad_action(cartpole: genvs.VecEnv) -> None:
    cartpole.reset()
    with pytest.raises(ValueError, match="action must have shape"):
        cartpole.step(torch.zeros(4, 2))
    with pytest.raises(TypeError, match="action must be a floating-point"):
        cartpole.step(torch.zeros(4, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match="action is on meta"):
        cartpole.step(torch.zeros(4, 1, device="meta"))
    with pytest.raises(ValueError, match="unknown task 'go3'"):
        genvs.make("go3", backend="genesis")
    with pytest.raises(TypeError, match="cuda_graphs must be True or False"):
        genvs.make("cartpole_balance", backend="genesis", num_envs=4, device="cpu", cuda_graphs="yes")


def _check_graph_against_ops(graphed: Any, state: list[torch.Tensor]) -> None:
    """Replaying ``graphed``'s CUDA graph leaves ``state`` as running its ops one by one does, starting both
    from the same state (restored in between): floats to float32 rounding (the graph runs them compiled into
    fused kernels), everything else exactly."""
    saved = [x.clone() for x in state]
    graphed(replay=False)
    by_ops = [x.clone() for x in state]
    for x, s in zip(state, saved, strict=True):
        x.copy_(s)
    graphed(replay=True)
    for x, y in zip(state, by_ops, strict=True):
        if x.dtype.is_floating_point:
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5, equal_nan=True)
        else:
            assert torch.equal(x, y)


@pytest.mark.gpu
def test_gpu_own_tensors_and_no_host_transfers() -> None:
    """On CUDA: the joint state is a view of Genesis' own GPU buffers, the step's phases replayed as CUDA
    graphs compute what their ops compute one by one, and the adapter adds no device<->host copy to Genesis'
    own step (profiler, 10 steps of each: ours against Genesis' PD targets + scene.step())."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    import genesis as gs
    from gprl.envs.genesis_env import _Graphed

    if gs._initialized and gs.device.type != "cuda":
        pytest.skip("Genesis is initialised on the CPU in this process (run with -m gpu)")
    from torch.profiler import ProfilerActivity, profile

    n = 1024
    env = genvs.make("go2_walk", backend="genesis", num_envs=n, device="cuda")
    obs = env.reset(seed=0)
    task = env.task
    view = task.pos_view
    assert gs.use_zerocopy and obs.is_cuda and view.is_cuda
    ptr, before = view.data_ptr(), view.clone()
    for _ in range(3):  # warm up (kernel compilation)
        obs, *_ = env.step(torch.tanh(obs[:, 9:21]))
    assert view.data_ptr() == ptr and not torch.equal(view, before)  # same storage, updated by Genesis
    torch.testing.assert_close(view, task.robot.get_dofs_position())
    # with action latency the whole step is after the physics: one graph
    assert env.cuda_graphs and env._after.graph is not None and env._before.graph is None
    assert env._after.compiled() is not env._after.fn, "torch.compile failed: the graph replays unfused ops"
    state = [task.action, task.actions, task.last_actions, task.targets, task.ctrl_pos, env._values,
             env._flags, env._steps]  # fmt: skip
    task.action.copy_(torch.rand(n, 12, device="cuda") * 300 - 150)
    task.action[0, 0] = float("nan")
    env._flags[0, :10] = True  # ended episodes: masked rewards, flags kept
    env._steps.fill_(env.episode_length - 1)  # the time limit is reached at this step
    _check_graph_against_ops(env._after, state)
    assert env._flags[1, 10:].any() and not env._flags[1, :10].any()
    values, flags = env._packed  # the graph's last op: the packed copy the step hands out
    assert torch.equal(values, env._values) and torch.equal(flags, env._flags.view(-1))
    before_physics = _Graphed(task.before_physics, fuse=True)  # the phase a task without latency replays
    saved = [x.clone() for x in state]
    before_physics.capture()
    for x, s in zip(state, saved, strict=True):
        x.copy_(s)
    _check_graph_against_ops(before_physics, state)
    env.reset(seed=0)
    obs, *_ = env.step(torch.tanh(obs[:, 9:21]))
    targets = task.default_dof_pos.expand(n, -1).contiguous()

    def host_copies(loop) -> list[str]:
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            loop()
            torch.cuda.synchronize()
        return [e.name for e in prof.events() if "Memcpy HtoD" in e.name or "Memcpy DtoH" in e.name]

    def genesis_own() -> None:
        for _ in range(10):
            task.robot.control_dofs_position(targets, task.dofs)
            task.robot.solver.scene.step()

    def ours() -> None:
        o = obs
        for _ in range(10):
            o, *_ = env.step(torch.tanh(o[:, 9:21]))

    raw, adapter = host_copies(genesis_own), host_copies(ours)
    print(f"device<->host copies in 10 steps: Genesis' own loop {len(raw)}, ours {len(adapter)}")
    assert len(adapter) <= len(raw), f"the adapter adds device<->host copies: {adapter} vs Genesis' own {raw}"
