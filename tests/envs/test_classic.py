"""The native classic-control backend (envs/classic_env.py) against Gymnasium's own environments, bit for bit:
environment i of a batch reset with seed s against ``gymnasium.make(id).reset(seed=s + i)``, both stepped with
the same actions past terminations and the time limit, under envs/base.py's masking rules."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium", reason="needs the gymnasium extra: pip install -e '.[gymnasium]'")

import gprl.envs as genvs

N = 7
# a heuristic that reaches the task's goal (or keeps the pole up), from the observations; environment i
# follows it with probability 1 - i / (N - 1), else acts at random: some episodes end early, some run out
HEURISTICS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "CartPole": lambda o: (o[:, 2] + 0.5 * o[:, 3] > 0).astype(np.int64),
    "MountainCar": lambda o: np.where(o[:, 1] > 0, 2, 0),
    "Acrobot": lambda o: np.where(o[:, 5] > 0, 2, 0),
    "MountainCarContinuous": lambda o: np.where(o[:, 1] > 0, 1.5, -1.5),  # beyond the bounds: clipped
    "Pendulum": lambda o: -3.0 * o[:, 1],
}
# the simulated state, in Gymnasium's order (its env.unwrapped.state): float64 where Gymnasium keeps float64
STATE: dict[str, Callable[[object], list[np.ndarray]]] = {
    "CartPole": lambda t: [t.x, t.x_dot, t.theta, t.theta_dot],
    "Pendulum": lambda t: [t.th, t.thdot],
    "MountainCar": lambda t: [t.position, t.velocity],
    "MountainCarContinuous": lambda t: [t.position, t.velocity],
    "Acrobot": lambda t: t.s,
}


def _actions(env: genvs.VecEnv, obs: np.ndarray, rng: np.random.Generator) -> tuple[torch.Tensor, list]:
    """This step's raw actions for our batch and what Gymnasium is given, as envs/base.py maps them."""
    n = env.num_envs
    follow = rng.random(n) >= np.arange(n) / (n - 1)
    plan = HEURISTICS[env.name.split("-v")[0]](obs)
    if env.discrete:
        scores = rng.normal(size=(n, env.num_actions)).astype(np.float32)  # the argmax is taken
        scores[follow, plan[follow]] += 10.0
        return torch.from_numpy(scores), [int(a) for a in scores.argmax(1)]
    act = np.where(follow, plan, rng.normal(0.0, 2.0 * float(env.action_high[0]), n)).astype(np.float32)
    odd = rng.random(n)  # NaN -> 0, +-inf -> the bound, as every backend's prepare_action does
    act[odd < 0.05] = np.nan
    act[(odd >= 0.05) & (odd < 0.08)] = np.inf
    act[(odd >= 0.08) & (odd < 0.11)] = -np.inf
    low, high = env.action_low.numpy(), env.action_high.numpy()
    given = np.clip(np.nan_to_num(act[:, None], nan=0.0), low, high).astype(np.float32)
    return torch.from_numpy(act[:, None].copy()), list(given)


def _compare(env_id: str, seed: int, n: int = N, steps: int | None = None,
             **kwargs: object) -> tuple[np.ndarray, np.ndarray]:
    """Steps both ``steps`` times (default: past the time limit), asserting equality at every step; returns
    Gymnasium's flags at the end."""
    env = genvs.make(env_id, backend="classic", num_envs=n, seed=seed, **kwargs)
    assert env.backend == "classic" and env.episode_length == gym.spec(env_id).max_episode_steps
    refs = [gym.make(env_id, **kwargs) for _ in range(n)]
    obs = env.reset(seed=seed).numpy()
    ref_obs = np.stack([ref.reset(seed=seed + i)[0] for i, ref in enumerate(refs)])
    assert obs.dtype == np.float32 and np.array_equal(obs, ref_obs)
    rng = np.random.default_rng(seed)
    # the float64 rewards before the float32 cast, to compare them too
    task_step, rewards64 = env.task.step, []

    def step_keeping_rewards(action: np.ndarray) -> tuple[np.ndarray, ...]:
        out = task_step(action)
        rewards64.append(out[1])
        return out

    env.task.step = step_keeping_rewards
    term, trunc = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
    for _ in range(env.episode_length + 3 if steps is None else steps):
        live = ~(term | trunc)
        raw, given = _actions(env, obs, rng)
        obs_t, reward_t, term_t, trunc_t = env.step(raw)
        obs = obs_t.numpy()
        reward = np.zeros(n, dtype=np.float32)  # an ended episode's reward is 0, its flags stay
        for i in np.flatnonzero(live):
            ref_obs[i], r, term[i], trunc[i], _ = refs[i].step(given[i])
            reward[i] = np.float32(r)
            assert rewards64[-1][i] == r
            trunc[i] &= not term[i]  # truncated: the time limit, for episodes not terminated
        assert np.array_equal(obs[live], ref_obs[live]), f"observations differ at step {env.elapsed_steps}"
        state = np.stack(STATE[env.task.family](env.task), axis=1)
        ref_state = np.stack([np.asarray(ref.unwrapped.state) for ref in refs])
        assert state.dtype == ref_state.dtype and np.array_equal(state[live], ref_state[live]), \
            f"states differ at step {env.elapsed_steps}"
        assert reward_t.dtype == torch.float32 and np.array_equal(reward_t.numpy(), reward)
        assert np.array_equal(term_t.numpy(), term) and np.array_equal(trunc_t.numpy(), trunc)
    return term, trunc


@pytest.mark.parametrize("env_id, kwargs", [
    ("CartPole-v1", {}), ("CartPole-v0", {}), ("CartPole-v1", {"sutton_barto_reward": True}),
    ("MountainCar-v0", {}), ("MountainCar-v0", {"goal_velocity": 0.01}), ("Acrobot-v1", {}),
])  # fmt: skip
def test_discrete_tasks_equal_gymnasium(env_id: str, kwargs: dict) -> None:
    term, trunc = _compare(env_id, 11, **kwargs)
    assert term.any() and trunc.any() and (term | trunc).all()  # both endings were compared


@pytest.mark.parametrize("env_id, kwargs", [
    ("Pendulum-v1", {}), ("Pendulum-v1", {"g": 9.81}), ("MountainCarContinuous-v0", {}),
    ("MountainCarContinuous-v0", {"goal_velocity": 0.02}),
])  # fmt: skip
def test_continuous_tasks_with_out_of_bound_and_nan_actions_equal_gymnasium(env_id: str,
                                                                             kwargs: dict) -> None:
    term, trunc = _compare(env_id, 5, **kwargs)
    assert trunc.any() and (term.any() or env_id.startswith("Pendulum")) and (term | trunc).all()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "MountainCar-v0",
                                    "MountainCarContinuous-v0", "Acrobot-v1"])
def test_a_large_batch_equals_gymnasium(env_id: str) -> None:
    """More initial states and actions, fewer steps: where a rarely differing operation would show."""
    _compare(env_id, 1234, n=200, steps=30)


def test_unseeded_reset_continues_each_environments_stream() -> None:
    env = genvs.make("Acrobot-v1", backend="classic", num_envs=3, seed=4)  # the first reset() takes seed 4
    refs = [gym.make("Acrobot-v1") for _ in range(3)]
    first = np.stack([ref.reset(seed=4 + i)[0] for i, ref in enumerate(refs)])
    assert np.array_equal(env.reset().numpy(), first)
    assert np.array_equal(env.reset().numpy(), np.stack([ref.reset()[0] for ref in refs]))


def test_auto_picks_classic_and_gymnasium_stays_available() -> None:
    assert genvs.make("Pendulum-v1").backend == "classic"
    assert genvs.make("Pendulum-v1", backend="gymnasium").backend == "gymnasium"
    assert genvs.auto_backend("MountainCarContinuous-v0") == "classic"
    assert genvs.auto_backend("FrozenLake-v1") == "gymnasium"
    assert "Acrobot-v1" in genvs.task_names("classic") and "Hopper-v5" not in genvs.task_names("classic")
    env = genvs.make("CartPole-v1", num_envs=2)
    assert env.obs_names == ["cart_position", "cart_velocity", "pole_angle", "pole_angular_velocity"]
    assert env.discrete and env.num_actions == 2
    env = genvs.make("MountainCarContinuous-v0", num_envs=2)
    assert not env.discrete and env.act_dim == 1 and float(env.action_low[0]) == -1.0
    with pytest.raises(TypeError, match=r"unknown keyword argument.*'gravity'.*\['g'\]"):
        genvs.make("Pendulum-v1", gravity=9.81)
    with pytest.raises(ValueError, match=r"unknown task 'LunarLander-v3' for backend 'classic'"):
        genvs.make("LunarLander-v3", backend="classic")
