"""Native batched MuJoCo: the Gymnasium v5 locomotion tasks on a thread pool, without per-environment Python.

All ``num_envs`` simulations live in one :class:`mujoco.batch.Batch` (MuJoCo ≥ 3.17): one call steps them all
on MuJoCo's own threads (the GIL is released), keeping each simulation's full integration state (warm start
included), so results are bit-identical to Gymnasium's one-``MjData``-per-environment loop. Rewards,
observations and terminations are vectorised NumPy (:mod:`.mujoco_tasks`). Ended episodes are not stepped
any more: each call steps only the live simulations.

Reset noise is drawn per environment from a NumPy generator seeded with ``seed + i``, as Gymnasium's vector
env seeds its sub-environments, so ``reset(seed)`` gives Gymnasium's initial states for the same seed.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

from ._deps import require
from .base import StepResult, VecEnv
from .mujoco_tasks import TASKS, State, Task, gymnasium_asset


def _np_random(seed: int) -> np.random.Generator:
    # gymnasium.utils.seeding.np_random, so that per-environment streams match Gymnasium's
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))


def load_model(task: Task) -> Any:
    """Compile the task's Gymnasium XML, as Gymnasium's MujocoEnv does."""
    mujoco = require("mujoco", "mujoco")
    return mujoco.MjModel.from_xml_path(gymnasium_asset(task.xml_file))


class BatchSim:
    """All simulations in one ``mujoco.batch.Batch``: one call per step, MuJoCo's threads, no Python per env.

    Bit-identical to one MjData per simulation, but only fields MuJoCo computes inside ``mj_step`` are
    available: ``cfrc_ext`` (``mj_rnePostConstraint``, which Gymnasium calls after the step on the last
    Runge-Kutta stage) is not, hence :class:`ThreadedSim` for the tasks that need it.
    """

    def __init__(self, model: Any, num_envs: int, fields: tuple[str, ...], nthread: int) -> None:
        from mujoco import batch as mj_batch

        self.batch = mj_batch.Batch(model, nsim=num_envs, nthread=nthread)
        self.qpos, self.qvel, self.ctrl = (self.batch.bind(f) for f in ("qpos", "qvel", "ctrl"))
        self.fields = {f: self.batch.bind(f) for f in fields}

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        import mujoco

        # mj_resetData, then the state, then mj_forward: Gymnasium's reset() and set_state()
        self.batch.reset(stage=mujoco.mjtStage.mjSTAGE_NONE)
        self.qpos[:] = qpos
        self.qvel[:] = qvel
        self.batch.forward()

    def step(self, ids: np.ndarray | None, nstep: int) -> None:
        self.batch.step(ids=ids, nstep=nstep)

    def close(self) -> None:
        pass


class ThreadedSim:
    """One MjData per simulation, stepped in chunks on a thread pool (MuJoCo releases the GIL in mj_step).

    Each thread runs ``mj_step`` + ``mj_rnePostConstraint`` over its chunk, exactly Gymnasium's
    ``do_simulation``, and copies the results into shared ``[N, ...]`` arrays.
    """

    def __init__(self, model: Any, num_envs: int, fields: tuple[str, ...], nthread: int) -> None:
        import mujoco

        self.model = model
        self.datas = [mujoco.MjData(model) for _ in range(num_envs)]
        self.qpos = np.zeros((num_envs, model.nq))
        self.qvel = np.zeros((num_envs, model.nv))
        self.ctrl = np.zeros((num_envs, model.nu))
        self.fields = {f: np.zeros((num_envs, *getattr(self.datas[0], f).shape)) for f in fields}
        self.nthread = nthread
        self.pool = ThreadPoolExecutor(self.nthread) if self.nthread > 1 else None

    def _copy_out(self, i: int, d: Any) -> None:
        self.qpos[i] = d.qpos
        self.qvel[i] = d.qvel
        for f, arr in self.fields.items():
            arr[i] = getattr(d, f)

    def _map(self, fn: Any, ids: np.ndarray) -> None:
        if self.pool is None or len(ids) < 2:
            fn(ids)
            return
        for fut in [self.pool.submit(fn, c) for c in np.array_split(ids, min(self.nthread, len(ids)))]:
            fut.result()

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> None:
        import mujoco

        def work(chunk: np.ndarray) -> None:
            for i in chunk:
                d = self.datas[i]
                mujoco.mj_resetData(self.model, d)
                d.qpos[:] = qpos[i]
                d.qvel[:] = qvel[i]
                mujoco.mj_forward(self.model, d)
                self._copy_out(i, d)

        self._map(work, np.arange(len(self.datas)))

    def step(self, ids: np.ndarray | None, nstep: int) -> None:
        import mujoco

        m = self.model

        def work(chunk: np.ndarray) -> None:
            for i in chunk:
                d = self.datas[i]
                d.ctrl[:] = self.ctrl[i]
                mujoco.mj_step(m, d, nstep)
                mujoco.mj_rnePostConstraint(m, d)
                self._copy_out(i, d)

        self._map(work, np.arange(len(self.datas)) if ids is None else ids)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None


class MujocoEnv(VecEnv):
    backend = "mujoco"

    def __init__(
        self,
        task: str,
        num_envs: int,
        device: torch.device | str | None = None,
        seed: int = 0,
        episode_length: int | None = None,
        nthread: int | None = None,
        **task_kwargs: Any,
    ) -> None:
        mujoco = require("mujoco", "mujoco")
        try:
            from mujoco import batch as _  # noqa: F401  (only checking the version)
        except ImportError as exc:
            raise ImportError(
                f"the native MuJoCo backend needs mujoco>=3.17 (mujoco.batch), found {mujoco.__version__}; "
                f'pip install -e ".[mujoco]"'
            ) from exc
        if task not in TASKS:
            raise ValueError(f"unknown MuJoCo task {task!r}; choose one of {sorted(TASKS)}")
        self.task = TASKS[task](**task_kwargs)
        self.model = load_model(self.task)
        self.frame_skip = int(self.task.frame_skip)
        self.dt = float(self.model.opt.timestep * self.frame_skip)
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        sim_cls = ThreadedSim if self.task.needs_rne_post else BatchSim
        # default: the cores this process may run on (taskset, cgroup cpusets), not every core of the host
        self.sim = sim_cls(self.model, num_envs, self.task.fields, nthread or len(os.sched_getaffinity(0)))
        self._qpos, self._qvel, self._ctrl, self._fields = (
            self.sim.qpos,
            self.sim.qvel,
            self.sim.ctrl,
            self.sim.fields,
        )
        self._qpos0 = self.model.qpos0.copy()
        self._qvel0 = np.zeros(self.model.nv)
        self._rngs: list[np.random.Generator] = []
        if episode_length is None:
            gym = require("gymnasium", "mujoco")
            episode_length = gym.spec(self.task.gym_id).max_episode_steps
        ctrlrange = self.model.actuator_ctrlrange
        super().__init__(
            name=task,
            num_envs=num_envs,
            obs_dim=len(self.task.obs_names(self.model)),
            act_dim=self.model.nu,
            device=torch.device(device) if device is not None else torch.device("cpu"),
            episode_length=episode_length,
            seed=seed,
            action_low=torch.as_tensor(ctrlrange[:, 0], dtype=torch.float32),
            action_high=torch.as_tensor(ctrlrange[:, 1], dtype=torch.float32),
            obs_names=self.task.obs_names(self.model),
            action_names=[self.model.actuator(i).name for i in range(self.model.nu)],
        )
        self._low, self._high = self.action_low.cpu().numpy(), self.action_high.cpu().numpy()

    def _state(self, ids: np.ndarray | None = None, at_reset: bool = False) -> State:
        if ids is None:
            return State(self.model, self._qpos, self._qvel, self._fields, at_reset)
        return State(
            self.model, self._qpos[ids], self._qvel[ids], {k: v[ids] for k, v in self._fields.items()}
        )

    def _tensor(self, x: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(x)).to(self.device, dtype)

    def set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> torch.Tensor:
        """Start new episodes from given states [N, nq], [N, nv] (as Gymnasium's ``set_state``);
        returns obs."""
        obs = self._set_state(qpos, qvel)
        self._begin_episodes()
        return obs

    def _set_state(self, qpos: np.ndarray, qvel: np.ndarray) -> torch.Tensor:
        qpos, qvel = np.asarray(qpos, dtype=np.float64), np.asarray(qvel, dtype=np.float64)
        n, m = self.num_envs, self.model
        if qpos.shape != (n, m.nq) or qvel.shape != (n, m.nv):
            raise ValueError(
                f"qpos/qvel must have shapes {(n, m.nq)}/{(n, m.nv)}, got {qpos.shape}/{qvel.shape}"
            )
        self.sim.set_state(qpos, qvel)
        return self._tensor(self.task.obs(self._state(at_reset=True)))

    def _reset(self, seed: int | None, starts: int | None = None) -> torch.Tensor:
        if seed is not None or not self._rngs:
            self._rngs = [_np_random(s) for s in self.env_seeds(self.seed if seed is None else seed, starts)]
        states = [self.task.reset_state(rng, self._qpos0, self._qvel0) for rng in self._rngs]
        return self._set_state(np.stack([q for q, _ in states]), np.stack([v for _, v in states]))

    def _advance(self, act: np.ndarray, live: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step the live simulations with ``act`` (float64 [N, act_dim]); the others are not stepped.

        Returns obs float32 [N, obs_dim] (every environment's), reward float32 [N] and terminated bool [N],
        both False/0 for the environments not stepped.
        """
        n = self.num_envs
        reward = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        nlive = int(np.count_nonzero(live))
        if nlive:
            ids = None if nlive == n else np.flatnonzero(live)
            a = act if ids is None else act[ids]
            before = self.task.before(self._state(ids))
            if ids is None:
                self._ctrl[:] = a
            else:
                self._ctrl[ids] = a
            self.sim.step(ids, self.frame_skip)
            r, term = self.task.reward(self._state(ids), before, a, self.dt)
            if ids is None:
                reward[:], terminated[:] = r, term
            else:
                reward[ids], terminated[ids] = r, term
        obs = self.task.obs(self._state()).astype(np.float32)
        return obs, reward, terminated

    def _action_array(self, action: torch.Tensor) -> np.ndarray:
        """:meth:`prepare_action` in NumPy (the same checks and values), as float64 [N, act_dim]."""
        self._check_action_tensor(action)
        self._check_continuous_action(action)
        a = action.detach()
        a = (a if a.dtype == torch.float32 else a.to(torch.float32)).numpy()
        if not np.isfinite(a).all():
            a = np.nan_to_num(a, nan=0.0)  # ±inf → ±float32 max, which the clip maps to the bounds
        # the clip of the float32 values (exact in float64), into a new float64 array: never the caller's
        # memory
        out = np.maximum(a, self._low, dtype=np.float64)
        return np.minimum(out, self._high, out=out)

    def step(self, action: torch.Tensor) -> StepResult:
        """:meth:`VecEnv.step` with the bookkeeping in NumPy: the same rules, no torch ops.

        On the CPU the returned tensors share memory with fresh NumPy arrays (no copies); a later step never
        writes into them.
        """
        if self.device.type != "cpu":
            return super().step(action)
        self._check_reset_called()
        act = self._action_array(action)
        term_prev, trunc_prev = self._terminated.numpy(), self._truncated.numpy()
        obs, reward, terminated = self._advance(act, ~(term_prev | trunc_prev))
        self._t += 1
        # ended episodes were not stepped: their reward is 0 and their new termination False already
        term = term_prev | terminated
        trunc = trunc_prev | ~term if self._t >= self.episode_length else trunc_prev
        self._terminated, self._truncated = torch.from_numpy(term), torch.from_numpy(trunc)
        return torch.from_numpy(obs), torch.from_numpy(reward), self._terminated, self._truncated

    def _step(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        # the base class's path (a non-CPU device): ended episodes are not stepped any more
        act = action.detach().to("cpu", torch.float64).numpy()
        obs, reward, terminated = self._advance(act, ~self.done.cpu().numpy())
        return self._tensor(obs), self._tensor(reward), self._tensor(terminated, torch.bool), None

    def close(self) -> None:
        self.sim.close()
