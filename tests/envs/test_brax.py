"""Brax / MuJoCo Playground backend: on JAX-CPU in CI, DLPack and profiler checks on the GPU (-m gpu)."""

from __future__ import annotations

import concurrent.futures
import inspect

import numpy as np
import pytest
import torch

pytest.importorskip("jax", reason="needs the brax extra: pip install -e '.[brax]'")
pytest.importorskip("brax", reason="needs the brax extra: pip install -e '.[brax]'")

import gprl.envs as genvs
from gprl.envs.base import VecEnv


@pytest.fixture(scope="module")
def pendulum() -> genvs.VecEnv:
    return genvs.make("inverted_pendulum", backend="brax", num_envs=6, device="cpu")


def test_protocol_on_jax_cpu(pendulum: genvs.VecEnv) -> None:
    env = pendulum
    obs = env.reset(seed=0)
    assert obs.shape == (6, 4) and obs.dtype == torch.float32 and obs.device == torch.device("cpu")
    assert env.act_dim == 1 and env.action_low.shape == (1,) and bool(env.action_low < env.action_high)
    obs, r, te, tr = env.step(torch.zeros(6, 1))
    assert r.shape == (6,) and r.dtype == torch.float32 and te.dtype == torch.bool and tr.dtype == torch.bool


def test_seeding_and_masking(pendulum: genvs.VecEnv) -> None:
    env = pendulum
    policy = lambda o: torch.full((3, 2, 1), 0.05)
    a = genvs.rollout(env, policy, 3, 2, max_steps=200, seed=5, check_every=10)
    b = genvs.rollout(env, policy, 3, 2, max_steps=200, seed=5, check_every=10)
    c = genvs.rollout(env, policy, 3, 2, max_steps=200, seed=6, check_every=10)
    assert torch.equal(a.returns, b.returns) and not torch.equal(a.returns, c.returns)
    # Brax's inverted pendulum pays 1 per step: with masking the return is the episode length exactly
    assert (a.lengths < 200).all() and a.steps < 200
    assert torch.equal(a.returns, a.lengths.double())
    # after termination the flags stay set and rewards are 0, though Brax's own done may flip back
    env.reset(seed=5)
    ended = torch.zeros(6, dtype=torch.bool)
    for _ in range(150):
        _, r, te, _ = env.step(torch.full((6, 1), 0.05))
        assert torch.equal(r[ended], torch.zeros(int(ended.sum())))
        assert te[ended].all()
        ended |= te


def test_a_shard_of_the_batch_resets_as_in_the_batch(pendulum: genvs.VecEnv) -> None:
    """Environment i resets from PRNGKey(seed + i): environments [4, 6) of the batch are a batch of 2 reset
    with seed + 4 (what a distributed run relies on); reset() without a seed continues per environment."""
    part = genvs.make("inverted_pendulum", backend="brax", num_envs=2, device="cpu")
    pendulum.reset(), part.reset()  # the first reset without a seed takes make(seed=...)
    assert torch.equal(pendulum.reset(seed=3)[4:], part.reset(seed=7))
    assert torch.equal(pendulum.reset()[4:], part.reset())
    assert not torch.equal(pendulum.reset(seed=3)[4:], pendulum.reset()[4:])


def test_fused_step_equals_the_base_class_step() -> None:
    """BraxEnv.step (clip, step and masking in one jitted call) gives exactly what VecEnv.step gives."""
    n, horizon = 6, 20
    env = genvs.make("inverted_pendulum", backend="brax", num_envs=n, device="cpu", episode_length=horizon)
    gen = torch.Generator().manual_seed(0)
    actions = []
    for t in range(horizon + 3):
        act = torch.randn(n, 1, generator=gen) * 2
        act[-1] = 0.0  # balances until the time limit
        if t == 3:
            act[0, 0], act[1, 0], act[2, 0] = float("nan"), float("inf"), -float("inf")
        actions.append(act.double() if t == 4 else act)

    def run(step: object) -> list[tuple[torch.Tensor, ...]]:
        env.reset(seed=3)
        out = []
        for t, act in enumerate(actions):
            out.append(tuple(x.clone() for x in step(env, act)))
            if t == 8:  # flags set by the base-class path are picked up by the fused one
                VecEnv.step(env, act)
        return out

    fused, ref = run(type(env).step), run(VecEnv.step)
    for a, b in zip(fused, ref, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.dtype == y.dtype and x.shape == y.shape
            # an ended episode keeps being stepped (its obs may go NaN): compared as it is
            torch.testing.assert_close(x, y, rtol=0, atol=0, equal_nan=True)
    assert env.done.all() and env._terminated[:-1].any() and env._truncated[-1]
    # every jitted function compiled once: the state after reset has the step's types and placement
    assert env._reset_fn._cache_size() == env._fused_fn._cache_size() == env._step_fn._cache_size() == 1


def test_ended_episodes_leave_the_simulated_batch() -> None:
    """compact=True (the default) goes on with the live episodes alone once they fit a smaller batch, and
    gives what compact=False gives: the same flags, the rewards and live observations to float32 rounding
    (XLA may round a smaller batch differently), and ended episodes keep their last observation."""
    n, horizon = 128, 300
    gain = torch.linspace(0, 1.5, n)[:, None]  # a feedback of increasing gain: the episodes end one by one

    def run(compact: bool, ahead: str = "") -> tuple[list[tuple[torch.Tensor, ...]], list[int], VecEnv]:
        env = genvs.make("inverted_pendulum", backend="brax", num_envs=n, device="cpu", compact=compact,
                         episode_length=horizon)
        obs, out, sizes = env.reset(seed=1), [], []
        if ahead:  # what a GPU does: every size compiled in a thread, used once it is ready
            env._compile_ahead = True
            if ahead == "ready":
                env._compile_rows_steps()
                [future.result() for future in env._compiled_rows.values()]
            else:
                env._compiled_rows = {m: concurrent.futures.Future() for m in env.compact_sizes}
        for t in range(horizon):
            wobble = 0.02 * torch.sin(0.1 * t * torch.arange(n))[:, None]
            action = gain * (3 * obs[:, 1:2] + 0.3 * obs[:, 3:4]) + wobble
            out.append(tuple(x.clone() for x in env.step(action)))
            obs, sizes = out[-1][0], sizes + [env.batch_size]
        return out, sizes, env

    (dropped, sizes, env), (full, full_sizes, _) = run(True), run(False)
    assert env.compact_sizes == [96, 64, 32]  # 16 is below COMPACT_MIN_ENVS["cpu"]
    assert set(full_sizes) == {n} and sizes[0] == n and {96, 64} <= set(sizes)
    assert sizes == sorted(sizes, reverse=True)
    assert env._fused_rows_fn._cache_size() == len(set(sizes) - {n})  # one compilation per size
    frozen: dict[int, torch.Tensor] = {}  # ended episodes left out of the batch: their observation stays
    for t, ((obs, r, te, tr), (obs_f, r_f, te_f, tr_f)) in enumerate(zip(dropped, full, strict=True)):
        assert torch.equal(te, te_f) and torch.equal(tr, tr_f)
        torch.testing.assert_close(r, r_f, rtol=1e-5, atol=1e-5)
        live = ~(te | tr)
        torch.testing.assert_close(obs[live], obs_f[live], rtol=1e-5, atol=1e-5)
        for i, last in frozen.items():
            torch.testing.assert_close(obs[i], last, rtol=0, atol=0, equal_nan=True)
        if t and sizes[t] < sizes[t - 1]:  # compacted after this step: the ended ones are out from the next
            frozen.update({i: dropped[t + 1][0][i] for i in torch.nonzero(~live).flatten().tolist()})
    assert 0 < len(frozen) < n and env.done.all()
    # the same programs compiled ahead give the same bits; sizes still compiling are not waited for
    for ahead, expected, expected_sizes in (("ready", dropped, sizes), ("pending", full, full_sizes)):
        out, ahead_sizes, ahead_env = run(True, ahead)
        assert ahead_sizes == expected_sizes and ahead_env._fused_rows_fn._cache_size() == 0
        for x, y in zip(out, expected, strict=True):
            for a, b in zip(x, y, strict=True):
                torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    with pytest.raises(RuntimeError, match="compacted"):
        VecEnv.step(env, torch.zeros(n, 1))
    assert env.reset(seed=1).shape == (n, 4) and env.batch_size == n
    a = genvs.rollout(env, lambda o: gain.view(n, 1, 1) * 3 * o[..., 1:2], n, max_steps=horizon, seed=4)
    env_full = genvs.make("inverted_pendulum", backend="brax", num_envs=n, device="cpu", compact=False,
                          episode_length=horizon)
    b = genvs.rollout(env_full, lambda o: gain.view(n, 1, 1) * 3 * o[..., 1:2], n, max_steps=horizon, seed=4)
    assert torch.equal(a.lengths, b.lengths) and a.steps == b.steps
    torch.testing.assert_close(a.returns, b.returns)
    with pytest.raises(TypeError, match="compact"):
        genvs.make("inverted_pendulum", backend="brax", num_envs=2, device="cpu", compact=1)


def test_dlpack_shares_storage_on_cpu(pendulum: genvs.VecEnv) -> None:
    env = pendulum
    obs = env.reset(seed=0)
    assert obs.data_ptr() == env._state.obs.unsafe_buffer_pointer()
    action = env.prepare_action(torch.zeros(6, 1))
    assert env.to_jax(action).unsafe_buffer_pointer() == action.data_ptr()
    obs, *_ = env.step(action)  # the fused step's observation is the new state's own buffer
    assert obs.data_ptr() == env._state.obs.unsafe_buffer_pointer()


def test_jaxlib_import_is_used_and_matches_the_public_import(
    pendulum: genvs.VecEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Actions enter through jaxlib's own DLPack call where it checks out, through jax.dlpack otherwise: the
    same episodes either way, and a jaxlib whose call fails or differs falls back to the public import."""
    from gprl.envs import brax_env

    env = pendulum
    assert env._import is not None  # this jaxlib's call passed the probe: CI runs the fast path
    actions = [torch.full((6, 1), v) for v in (0.3, -0.2, 0.1, 0.4)]

    def episode() -> list[torch.Tensor]:
        out = [env.reset(seed=2).clone()]
        for a in actions:
            out.extend(x.clone() for x in env.step(a))
        return out

    fast = episode()
    monkeypatch.setattr(env, "_import", None)
    for x, y in zip(fast, episode(), strict=True):
        assert torch.equal(x, y)

    from jax._src.lib import _jax

    def wrong_signature(*args):
        raise TypeError("dlpack_managed_tensor_to_buffer(): incompatible function arguments")

    monkeypatch.setattr(_jax, "dlpack_managed_tensor_to_buffer", wrong_signature)
    assert brax_env._dlpack_importer(env._jax, env.jax_device, env.device) is None
    monkeypatch.setattr(_jax, "dlpack_managed_tensor_to_buffer", lambda *args: env._jax.numpy.zeros(6))
    assert brax_env._dlpack_importer(env._jax, env.jax_device, env.device) is None  # not a view of the tensor


def test_bad_inputs(pendulum: genvs.VecEnv) -> None:
    pendulum.reset()
    with pytest.raises(ValueError, match="action must have shape"):
        pendulum.step(torch.zeros(6, 2))
    with pytest.raises(ValueError, match="pipeline must be one of"):
        genvs.make("hopper", backend="brax", pipeline="bullet", device="cpu")
    with pytest.raises(TypeError, match="cuda_graphs must be True or False"):
        genvs.make("hopper", backend="brax", cuda_graphs="yes", device="cpu")
    assert pendulum.compiler_options is None  # CUDA graphs are a GPU compile option


def test_playground_dm_control_task() -> None:
    pytest.importorskip("mujoco_playground", reason="needs MuJoCo Playground: pip install playground")
    env = genvs.make("CartpoleBalance", backend="brax", num_envs=4, device="cpu")
    assert genvs.make.__module__ and env.obs_dim == 5 and env.act_dim == 1 and env.episode_length == 1000
    res = genvs.rollout(env, lambda o: torch.zeros(2, 2, 1), 2, 2, max_steps=20, seed=0)
    assert res.returns.shape == (2, 2) and (res.returns > 0).all() and (res.lengths == 20).all()
    # names read off the model by value: the cart's slider, the pole's orientation, both velocities
    assert env.action_names == ["slide"] and env.obs_names is None
    assert env.observation_names() == ["slider", "pole_1_xmat_xx", "pole_1_xmat_xz", "slider_vel",
                                       "hinge_1_vel"]


def test_observation_columns_are_matched_by_value() -> None:
    from gprl.envs.brax_env import match_columns

    rng = np.random.default_rng(0)
    bank = rng.normal(size=(40, 4))
    bank[:, 3] = 1.0  # a column that never moves names nothing
    obs = np.stack([bank[:, 2], np.cos(bank[:, 0]), bank[:, 0] + 1e-9, np.ones(40)], axis=1)
    assert match_columns(obs, bank, ["a", "b", "c", "k"]) == ["c", None, "a", None]



def test_swimmer_steps_as_brax_itself() -> None:
    """Brax's swimmer (fluid forces: ``jnp.clip(a_min=...)``, gone from JAX 0.10) runs through the adapter and
    gives what Brax's own vmapped reset and step give for the same keys and actions."""
    import jax
    import jax.numpy as jnp
    from brax import envs as brax_envs

    n, seed = 4, 11
    env = genvs.make("swimmer", backend="brax", num_envs=n, device="cpu", seed=seed)
    assert (env.obs_dim, env.act_dim, env.episode_length) == (8, 2, 1000)
    ref = brax_envs.get_environment("swimmer", backend="generalized")  # after make: with the shim in place
    # the adapter's rule: environment i from PRNGKey(seed + i), split, the second half resets
    keys = jax.vmap(jax.random.split)(jax.vmap(jax.random.PRNGKey)(jnp.arange(n, dtype=jnp.uint32) + seed))
    state = jax.jit(jax.vmap(ref.reset))(keys[:, 1])
    step = jax.jit(jax.vmap(ref.step))
    torch.testing.assert_close(env.reset(), torch.from_numpy(np.asarray(state.obs)))
    gen = torch.Generator().manual_seed(0)
    moved = 0.0
    for _ in range(25):
        action = torch.rand(n, 2, generator=gen) * 2 - 1
        obs, reward, terminated, truncated = env.step(action)
        state = step(state, jnp.asarray(action.numpy()))
        torch.testing.assert_close(obs, torch.from_numpy(np.asarray(state.obs)), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(reward, torch.from_numpy(np.asarray(state.reward)), rtol=1e-5, atol=1e-6)
        assert not terminated.any() and not truncated.any()  # the swimmer never terminates
        moved += float(reward.abs().sum())
    assert moved > 0


def test_clip_shim_is_scoped_to_brax_fluid(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shim changes the name ``brax.fluid`` looks up, nothing in JAX, and only where JAX lacks a_min."""
    import brax.fluid
    import jax.numpy as jnp
    from gprl.envs import brax_env

    x = jnp.asarray([-2.0, 0.5, 3.0])
    monkeypatch.setattr(brax.fluid, "jp", jnp)
    monkeypatch.setattr(brax_env, "_clip_takes_a_min", lambda jnp: True)  # a JAX that still takes a_min
    assert not brax_env.patch_brax_for_jax() and brax.fluid.jp is jnp
    monkeypatch.setattr(brax_env, "_clip_takes_a_min", lambda jnp: False)
    assert brax_env.patch_brax_for_jax() and brax_env.patch_brax_for_jax()  # idempotent
    jp = brax.fluid.jp
    assert isinstance(jp, brax_env.ClipCompatNumpy) and jp.sum is jnp.sum and jnp.clip is not jp.clip
    assert np.asarray(jp.clip(x, a_min=0.0)).tolist() == [0.0, 0.5, 3.0]
    assert np.asarray(jp.clip(x, a_max=1.0)).tolist() == [-2.0, 0.5, 1.0]
    assert np.asarray(jp.clip(x, -1.0, 1.0)).tolist() == [-1.0, 0.5, 1.0]
    with pytest.raises(TypeError, match="not both"):
        jp.clip(x, 0.0, a_min=1.0)
    if "a_min" not in inspect.signature(jnp.clip).parameters:  # JAX >= 0.10: its own clip still refuses a_min
        with pytest.raises(TypeError):
            jnp.clip(x, a_min=0.0)

# ---------------------------------------------------------------------------------------------- GPU only
@pytest.mark.gpu
def test_gpu_no_copy_and_no_host_transfers() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    env = genvs.make("hopper", backend="brax", num_envs=1024, device="cuda")
    obs = env.reset(seed=0)
    assert obs.is_cuda and obs.data_ptr() == env._state.obs.unsafe_buffer_pointer()
    action = env.prepare_action(torch.zeros(1024, env.act_dim, device="cuda"))
    assert env.to_jax(action).unsafe_buffer_pointer() == action.data_ptr()
    for _ in range(3):  # compile and warm up
        obs, *_ = env.step(action)
    assert obs.data_ptr() == env._state.obs.unsafe_buffer_pointer()
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            a = torch.tanh(obs[:, : env.act_dim])
            obs, _r, _te, _tr = env.step(a)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()]
    copies = [n for n in names if "Memcpy HtoD" in n or "Memcpy DtoH" in n or "cudaMemcpy " in n]
    assert not copies, f"device<->host copies inside the step loop: {sorted(set(copies))}"
    prof.export_chrome_trace("/tmp/gprl_brax_step_trace.json")


@pytest.mark.gpu
def test_gpu_import_waits_for_the_torch_work_that_wrote_the_tensor() -> None:
    """The import orders JAX's read after torch's pending work by an event: JAX must read what torch writes
    after ~0.5 s of queued GPU sleep, not the zeros there when the import is made, on torch's default stream
    and on a side stream."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    env = genvs.make("inverted_pendulum", backend="brax", num_envs=4, device="cuda")
    assert env._import is not None
    n = 1 << 20
    total = env._jax.jit(env._jax.numpy.sum)
    total(env._jax.numpy.zeros(n)).block_until_ready()  # compiled before the timed part
    for stream in (torch.cuda.default_stream(), torch.cuda.Stream()):
        with torch.cuda.stream(stream):
            x = torch.zeros(n, device="cuda")
            torch.cuda.synchronize()
            torch.cuda._sleep(1_000_000_000)  # ~0.5 s of GPU clock cycles ahead of the write
            x.fill_(1.0)
            assert float(total(env.to_jax(x))) == n, f"JAX read x before torch wrote it ({stream})"


@pytest.mark.gpu
def test_gpu_cuda_graphs_step_as_jax_defaults() -> None:
    """CUDA graphs (the default on a GPU) change how the step is launched, not what it computes: the same
    episodes as with JAX's default compile options, to float32 rounding over the first steps. Not bit for bit:
    Brax's step on the GPU is not bit-reproducible even run to run (seen on the H100), and
    hopper's chaos grows the differences (on the H100 up to 7e-5 after one step, 1e-2 after 10)."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    n, steps = 512, 5
    envs = [genvs.make("hopper", backend="brax", num_envs=n, device="cuda", cuda_graphs=g)
            for g in (True, False)]
    assert envs[0].compiler_options is not None and envs[1].compiler_options is None
    gen = torch.Generator(device="cuda").manual_seed(0)
    actions = [torch.rand(n, envs[0].act_dim, device="cuda", generator=gen) * 2 - 1 for _ in range(steps)]

    def run(env: genvs.VecEnv) -> list[torch.Tensor]:
        out = [env.reset(seed=1).clone()]
        for a in actions:
            out.extend(x.clone() for x in env.step(a))
        return out

    for x, y in zip(run(envs[0]), run(envs[1]), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-3, atol=1e-3, equal_nan=True)


def test_observation_names_come_from_the_simulated_model(pendulum: genvs.VecEnv) -> None:
    """Formulas of Brax policies read joint names, as the native MuJoCo ones do, where the layout is alike
    (tests/train/test_suite.py checks the names reach the exported policies)."""
    pytest.importorskip("mujoco")
    from brax import envs as brax_envs
    from gprl.envs.brax_env import _obs_names

    # Brax's observation_size property compiles a reset: the sizes are given here (Gymnasium v5's)
    names = _obs_names("hopper", brax_envs.get_environment("hopper"), 11)
    assert names == genvs.make("hopper", backend="mujoco", num_envs=1, seed=0).obs_names
    assert names[:2] == ["rootz", "rooty"] and names[-1] == "foot_joint_vel"
    # Brax's own swimmer model names its joints differently from Gymnasium's: its names are the ones shown
    assert _obs_names("swimmer", brax_envs.get_environment("swimmer"), 8) == [
        "rot", "rot2", "rot3", "slider1_vel", "slider2_vel", "rot_vel", "rot2_vel", "rot3_vel"]
    assert _obs_names("hopper", brax_envs.get_environment("hopper"), 12) is None  # sizes must agree
    assert _obs_names("ant", brax_envs.get_environment("ant"), 27) is None  # another layout than Gymnasium's
    assert pendulum.obs_names is None


def test_compiled_steps_go_to_gprls_cache_unless_the_user_chose_a_folder(monkeypatch, tmp_path) -> None:
    """JAX's persistent compilation cache keeps a run's compiled resets and steps for the next run: in
    ``$GPRL_CACHE/jax``, or in the folder the user gave JAX (JAX_COMPILATION_CACHE_DIR or its config)."""
    import jax
    from gprl.envs import brax_env

    monkeypatch.setenv("GPRL_CACHE", str(tmp_path))
    before = jax.config.jax_compilation_cache_dir
    try:
        jax.config.update("jax_compilation_cache_dir", None)
        brax_env._import_jax()
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "jax")
        jax.config.update("jax_compilation_cache_dir", str(tmp_path / "own"))
        brax_env._import_jax()
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "own")
    finally:
        jax.config.update("jax_compilation_cache_dir", before)
