"""Environment throughput per backend, task and batch size;
our adapter's overhead over the raw simulator loop.

Prints JSON: one line per record as it is measured, then everything with the machine's description.

What is counted: **live environment-steps**, i.e. steps of environments whose episode had not ended when they
were stepped. Our adapters keep an ended episode ended (masked) until ``reset()``, so their ended environments
count nothing (native MuJoCo does not step them at all; Brax steps them, masked, until the live ones fit a
smaller batch; Genesis steps them, masked). Gymnasium's vector env resets an ended sub-environment on its next
step (NEXT_STEP autoreset) and then runs a new episode: the reset step counts nothing, the new episode's steps
count as live, since they are real steps of a running episode. Throughput = live env-steps / wall time of the
step loop (resets are not timed).

The workload of a record: ``reset(seed)``, then at most ``--steps`` steps with uniform random actions within
the bounds (× ``--action-scale``; a bank of 16 action batches, cycled) until every episode has ended. An
untimed counting pass of the same workload (same seed, same actions) gives the live counts and the number of
steps; every timed loop then runs exactly that many steps. The loops of a record are timed interleaved (A, B,
C, then C, B, A, ...), ``--repeats`` samples each; a sample is as many whole rollouts as make it last
``--min-sample-s``. Figures are medians; ratios are medians of the per-repeat ratios (pairs taken back to
back). Each loop is warmed up first (JAX compilation included; on a GPU then ``--warmup-s`` of untimed
interleaved samples) and synchronised the same way (every queued GPU operation finished, JAX's and torch's)
before its clock stops.

Loops of a record (``loops`` in the JSON):

* ``ours``: ``gprl.envs.make(...).step(action)``, actions prepared on the device beforehand.
* ``raw``: the simulator's own loop doing the same simulation work, without our observations, rewards,
  action checks or bookkeeping: MuJoCo: ``mujoco.batch.Batch.step`` of the same live simulations with the
  same controls; Brax: ``jit(vmap(env.step))`` on all environments; Genesis: the PD targets through its
  API (``robot.control_dofs_position``) and ``scene.step()`` (``raw_scene_step``: ``scene.step()`` alone, the
  floor; our step writes the PD targets into Genesis' buffer itself); Gymnasium backend: Gymnasium's own
  ``SyncVectorEnv`` (its own live count). The overhead compares the times of ``ours`` and ``raw``. Brax's
  ``raw`` is compiled with the adapter's options (CUDA graphs of any length on a GPU); on a GPU
  ``raw_default_xla`` is the same loop compiled with JAX's defaults, and ``vs_raw_default_xla`` our
  throughput over it. Genesis on a GPU: ``ours_eager`` is ``ours`` with the step's phases launched op by op
  instead of replayed as CUDA graphs.
* MuJoCo and classic-control records also time Gymnasium's own vector envs on the same task, ``gym_sync``
  (``SyncVectorEnv``) and ``gym_async`` (``AsyncVectorEnv``, one process per environment, at most
  ``--async-max-concurrency`` stepping at once; only up to ``--async-max-envs`` environments);
  ``vs_gymnasium`` gives our throughput over each and over the faster (``baseline``). The classic backend
  steps ended episodes too (masked, counting nothing), so its live throughput falls with ``live_fraction``.

    python scripts/bench_envs.py                      # CPU: native MuJoCo vs Gymnasium, N = 1, 64, 1024
    python scripts/bench_envs.py --backends mujoco gymnasium         # + our Gymnasium adapter's overhead
    python scripts/bench_envs.py --backends classic --sizes 4000     # Pendulum-v1, CartPole-v1 vs Gymnasium
    python scripts/bench_envs.py --backends brax genesis --device cuda   # GPU: N = 1 ... 32768

On a machine shared with other work the wall-clock figures depend on what else runs: each record gives the
1-minute load average before and after, the CPU cores each loop actually kept busy (``cores_used``) and the
CPU time per live step (``cpu_us_per_live_step``, ``cpu_efficiency_vs_gymnasium``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import gprl.envs as genvs
import numpy as np
import torch

DEFAULT_TASKS = {
    "mujoco": ["hopper", "walker2d", "halfcheetah"],
    "gymnasium": ["hopper", "walker2d", "halfcheetah"],
    "classic": ["Pendulum-v1", "CartPole-v1"],
    "brax": ["hopper"],
    "genesis": ["go2_walk"],
}
DEFAULT_ACTION_SCALE = {"genesis": 0.2}  # small PD offsets: the robot stays up
CPU_SIZES, GPU_SIZES = [1, 64, 1024], [1, 64, 1024, 8192, 32768]
BANK = 16  # action batches, cycled
COUNTING = (
    "live env-steps: steps of environments whose episode had not ended when stepped (masked/ended ones count "
    "nothing); Gymnasium's vector env: every step of a running episode (its autoreset episodes included), "
    "not the reset steps"
)


# ---------------------------------------------------------------------------------------------- loops
class Loop:
    """One way of running the workload: ``start()`` (untimed: reset), ``run(steps)`` (timed), ``sync()``."""

    def __init__(self, name: str, what: str) -> None:
        self.name, self.what = name, what

    def start(self) -> None:
        raise NotImplementedError

    def run(self, steps: int) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        pass

    def close(self) -> None:
        pass

    def worker_pids(self) -> list[int]:
        """Other processes doing this loop's work (their CPU time is counted with ours)."""
        return []


def _cpu_seconds(pids: list[int]) -> float:
    """CPU time of this process (all threads) and of the given worker processes (their main threads)."""
    total = time.process_time()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as f:  # nanoseconds on a CPU, exact (not clock ticks)
                total += int(f.read().split()[0]) * 1e-9
        except OSError:
            pass
    return total


def _device_sync(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)  # every stream of the device: JAX's work too
    return lambda: None


class Ours(Loop):
    def __init__(self, env: genvs.VecEnv, bank: list[torch.Tensor], seed: int) -> None:
        super().__init__("ours", f"gprl.envs {env.backend} adapter: env.step(action)")
        self.env, self.bank, self.seed = env, bank, seed
        self._sync = _device_sync(env.device)
        self.last: Any = None

    def start(self) -> None:
        self.env.reset(seed=self.seed)
        self.sync()

    def run(self, steps: int) -> None:
        env, bank = self.env, self.bank
        for i in range(steps):
            self.last = env.step(bank[i % BANK])

    def sync(self) -> None:
        if self.env.backend == "brax" and self.last is not None:
            self.env._jax.block_until_ready(self.env._state)
        self._sync()

    def count(self, max_steps: int) -> tuple[list[int], list[np.ndarray | None]]:
        """Untimed pass: live environments per step (and their ids, for MuJoCo) until all episodes ended."""
        env = self.env
        env.reset(seed=self.seed)
        live_counts, live_ids = [], []
        for i in range(max_steps):
            live = ~env.done
            nlive = int(live.sum())
            if nlive == 0:
                break
            live_counts.append(nlive)
            live_ids.append(None if nlive == env.num_envs else torch.nonzero(live).flatten().cpu().numpy())
            env.step(self.bank[i % BANK])
        self.sync()
        return live_counts, live_ids


class OursEager(Ours):
    """``ours`` with the step's phases launched op by op
    (Genesis on a GPU: what ``cuda_graphs=False`` does)."""

    def __init__(self, env: genvs.VecEnv, bank: list[torch.Tensor], seed: int) -> None:
        super().__init__(env, bank, seed)
        self.name, self.what = "ours_eager", "ours, the step's phases op by op instead of CUDA graph replays"

    def run(self, steps: int) -> None:
        self.env.cuda_graphs = False
        try:
            super().run(steps)
        finally:
            self.env.cuda_graphs = True


class RawMujoco(Loop):
    def __init__(self, env: Any, bank: list[torch.Tensor], ids: list[np.ndarray | None], seed: int) -> None:
        super().__init__(
            "raw", "mujoco.batch: ctrl[ids] = action; Batch.step(ids, frame_skip) (same live sims)"
        )
        self.env, self.seed, self.ids = env, seed, ids
        self.bank = [b.detach().cpu().double().numpy() for b in bank]

    def start(self) -> None:
        self.env.reset(seed=self.seed)

    def run(self, steps: int) -> None:
        sim, fs, bank = self.env.sim, self.env.frame_skip, self.bank
        ctrl = sim.ctrl
        for i in range(steps):
            ids = self.ids[i]
            if ids is None:
                ctrl[:] = bank[i % BANK]
            else:
                ctrl[ids] = bank[i % BANK][ids]
            sim.step(ids, fs)


class RawBrax(Loop):
    def __init__(self, env: Any, bank: list[torch.Tensor], seed: int, default_xla: bool = False) -> None:
        if default_xla:
            super().__init__("raw_default_xla", "raw, compiled with JAX's default options")
        else:
            super().__init__("raw", f"jit(vmap(env.step))(state, action) on all environments, "
                                    f"compiler_options={env.compiler_options}")
        self.env, self.seed = env, seed
        self.step = env._step_fn
        if default_xla:
            with env._jax.default_device(env.jax_device):
                self.step = env._jax.jit(env._sim_step)
        self.jbank = [env.to_jax(env.prepare_action(b)) for b in bank]
        self._sync = _device_sync(env.device)
        self.state: Any = None

    def start(self) -> None:
        self.env.reset(seed=self.seed)
        self.state = self.env._state
        self.sync()

    def run(self, steps: int) -> None:
        step, state, bank = self.step, self.state, self.jbank
        for i in range(steps):
            state = step(state, bank[i % BANK])
        self.state = state

    def sync(self) -> None:
        if self.state is not None:
            self.env._jax.block_until_ready(self.state)
        self._sync()


class RawGenesis(Loop):
    def __init__(self, env: Any, bank: list[torch.Tensor], seed: int, control: bool = True) -> None:
        from gprl.envs.genesis_env import Go2Walk

        task = env.task
        self.position_control = isinstance(task, Go2Walk)  # PD targets; the classic task takes forces
        api = "control_dofs_position(targets)" if self.position_control else "control_dofs_force(forces)"
        if control:
            super().__init__("raw", f"robot.{api}; scene.step()")
        else:
            super().__init__("raw_scene_step", f"scene.step() alone (the controls {api} set at the reset)")
        self.env, self.seed, self.control = env, seed, control
        self.targets = [b * 0.25 + task.default_dof_pos for b in bank] if self.position_control else bank
        self._sync = _device_sync(env.device)

    def start(self) -> None:
        self.env.reset(seed=self.seed)
        self.sync()

    def run(self, steps: int) -> None:
        task = self.env.task
        robot, scene = task.robot, task.robot.solver.scene
        if not self.control:
            for _ in range(steps):
                scene.step()
        elif self.position_control:
            for i in range(steps):
                robot.control_dofs_position(self.targets[i % BANK], task.dofs)
                scene.step()
        else:
            for i in range(steps):
                robot.control_dofs_force(self.targets[i % BANK], task.dofs)
                scene.step()

    def sync(self) -> None:
        self._sync()


class GymVector(Loop):
    """Gymnasium's own vector env (NEXT_STEP autoreset), fed NumPy actions."""

    def __init__(self, name: str, gym_id: str, n: int, mode: str, bank: list[torch.Tensor], seed: int,
                 max_concurrency: int | None = None) -> None:  # fmt: skip
        import gymnasium as gym
        from gymnasium.vector import AutoresetMode

        kw: dict[str, Any] = {"autoreset_mode": AutoresetMode.NEXT_STEP}
        what = f"gymnasium {'SyncVectorEnv' if mode == 'sync' else 'AsyncVectorEnv'}({gym_id}, num_envs={n}"
        if mode == "async" and max_concurrency:
            kw["max_concurrency"] = max_concurrency
            what += f", max_concurrency={max_concurrency}"
        super().__init__(name, what + ")")
        self.vec = gym.make_vec(gym_id, num_envs=n, vectorization_mode=mode, vector_kwargs=kw)
        self.seed = seed
        space = self.vec.single_action_space
        # a discrete task's bank holds scores: Gymnasium is given their argmax, the action our adapters take
        discrete = isinstance(space, gym.spaces.Discrete)
        self.bank = [(b.argmax(1) if discrete else b).detach().cpu().numpy().astype(space.dtype)
                     for b in bank]

    def start(self) -> None:
        self.vec.reset(seed=self.seed)

    def run(self, steps: int) -> None:
        vec, bank = self.vec, self.bank
        for i in range(steps):
            vec.step(bank[i % BANK])

    def count(self, steps: int) -> list[int]:
        self.start()
        pending = np.zeros(self.vec.num_envs, dtype=bool)  # ended last step: this step is a reset step
        counts = []
        for i in range(steps):
            counts.append(int((~pending).sum()))
            _, _, term, trunc, _ = self.vec.step(self.bank[i % BANK])
            pending = np.asarray(term) | np.asarray(trunc)
        return counts

    def worker_pids(self) -> list[int]:
        return [p.pid for p in getattr(self.vec, "processes", [])]

    def close(self) -> None:
        self.vec.close()


# ---------------------------------------------------------------------------------------------- timing
def _timed(loop: Loop, steps: int, rollouts: int) -> tuple[float, float, float]:
    """Wall time of ``rollouts`` rollouts of ``steps`` steps (resets untimed), the part of it before the final
    sync, and the CPU time spent (this process and the loop's worker processes)."""
    total = enqueue = cpu = 0.0
    pids = loop.worker_pids()
    for _ in range(rollouts):
        loop.start()
        c0 = _cpu_seconds(pids)
        t0 = time.perf_counter()
        loop.run(steps)
        t1 = time.perf_counter()
        loop.sync()
        t2 = time.perf_counter()
        cpu += _cpu_seconds(pids) - c0
        total, enqueue = total + t2 - t0, enqueue + t1 - t0
    return total, enqueue, cpu


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def bench(backend: str, task: str, n: int, args: argparse.Namespace) -> dict[str, Any]:
    kw = {"device": args.device} if args.device else {}
    env = genvs.make(task, backend=backend, num_envs=n, episode_length=args.steps, seed=args.seed, **kw)
    gen = torch.Generator().manual_seed(args.seed)
    scale = args.action_scale if args.action_scale is not None else DEFAULT_ACTION_SCALE.get(backend, 1.0)
    if env.discrete:  # normal scores, whose argmax is the action
        scale = None
        bank = [torch.randn(n, env.num_actions, generator=gen).to(env.device) for _ in range(BANK)]
    else:  # uniform in the bounds, within [-1, 1] (Genesis' are ±100, PD offsets), × the action scale
        low, high = env.action_low.cpu().clamp(min=-1.0), env.action_high.cpu().clamp(max=1.0)
        mid, half = (high + low) / 2, (high - low) / 2
        bank = [(mid + half * (torch.rand(n, env.act_dim, generator=gen) * 2 - 1) * scale).to(env.device)
                for _ in range(BANK)]  # fmt: skip
    load0 = _load()
    ours = Ours(env, bank, args.seed)
    ours.count(args.steps)  # warm-up (JAX compilation)
    t0 = time.perf_counter()
    live, ids = ours.count(args.steps)
    count_s = time.perf_counter() - t0
    steps = len(live)
    loops: list[Loop] = [ours]
    if backend == "mujoco":
        loops.append(RawMujoco(env, bank, ids, args.seed))
    elif backend == "brax":
        loops.append(RawBrax(env, bank, args.seed))
        if env.compiler_options is not None:
            loops.append(RawBrax(env, bank, args.seed, default_xla=True))
    elif backend == "genesis":
        loops += [RawGenesis(env, bank, args.seed), RawGenesis(env, bank, args.seed, control=False)]
        if env.cuda_graphs:
            loops.append(OursEager(env, bank, args.seed))
    gym_id = None
    if backend in ("mujoco", "gymnasium", "classic"):
        from gprl.envs.gymnasium_env import SHARED_IDS

        gym_id = SHARED_IDS.get(task, task)
        name = "raw" if backend == "gymnasium" else "gym_sync"
        loops.append(GymVector(name, gym_id, n, "sync", bank, args.seed))
        if backend != "gymnasium" and n <= args.async_max_envs:
            loops.append(
                GymVector("gym_async", gym_id, n, "async", bank, args.seed, args.async_max_concurrency)
            )
    live_total = {lp.name: float(sum(live)) for lp in loops}
    for lp in loops:
        if isinstance(lp, GymVector):
            live_total[lp.name] = float(sum(lp.count(steps)))
        lp.start()
        lp.run(min(steps, 5))  # warm-up: JIT, worker processes, caches
        lp.sync()
    # whole rollouts per sample, so that a sample lasts about --min-sample-s
    rollouts = max(1, math.ceil(args.min_sample_s / max(count_s, 1e-6)))
    warmup_s = args.warmup_s if args.warmup_s is not None else (3.0 if env.device.type == "cuda" else 0.0)
    warm_end = time.perf_counter() + warmup_s
    while time.perf_counter() < warm_end:  # without it the first Brax samples run slower
        for lp in loops:
            _timed(lp, steps, rollouts)
    times: dict[str, list[float]] = {lp.name: [] for lp in loops}
    enq: dict[str, list[float]] = {lp.name: [] for lp in loops}
    cpu: dict[str, list[float]] = {lp.name: [] for lp in loops}
    repeats = args.repeats or (7 if env.device.type == "cuda" else 3)
    for r in range(repeats):
        for lp in loops if r % 2 == 0 else loops[::-1]:
            t, e, c = _timed(lp, steps, rollouts)
            times[lp.name].append(t)
            enq[lp.name].append(e)
            cpu[lp.name].append(c)
    load1 = _load()

    def rate(name: str) -> float:
        return float(np.median([live_total[name] * rollouts / t for t in times[name]]))

    def cpu_per_step(name: str) -> float:
        return float(np.median(cpu[name])) / (live_total[name] * rollouts)

    def paired(a: str, b: str) -> float:
        """Median over repeats of throughput(a) / throughput(b)."""
        return float(np.median([(live_total[a] / ta) / (live_total[b] / tb)
                                for ta, tb in zip(times[a], times[b], strict=True)]))  # fmt: skip

    def overheads(a: str, b: str) -> list[float]:
        """Per repeat, how much longer loop ``a`` took than loop ``b``, in %."""
        return [100.0 * (ta - tb) / tb for ta, tb in zip(times[a], times[b], strict=True)]

    rec: dict[str, Any] = {
        "backend": backend, "task": task, "device": str(env.device), "num_envs": n, "steps": steps,
        "max_steps": args.steps, "action_scale": scale, "rollouts_per_sample": rollouts, "repeats": repeats,
        "live_env_steps": int(live_total["ours"]), "live_fraction": live_total["ours"] / (n * steps),
        "steps_per_s": rate("ours"),
    }  # fmt: skip
    if "raw" in times:
        rec["raw_steps_per_s"] = rate("raw")
        over = overheads("ours", "raw")
        rec["overhead_pct"] = float(np.median(over))
        rec["overhead_pct_samples"] = [round(o, 2) for o in over]
    if env.device.type == "cuda":  # host time to queue a step; close to the synced time means the host waits
        for name, ts in times.items():
            rec[f"{name}_host_us_per_step"] = float(np.median(enq[name])) / (rollouts * steps) * 1e6
            rec[f"{name}_synced_us_per_step"] = float(np.median(ts)) / (rollouts * steps) * 1e6
    if "raw_scene_step" in times:  # the floor: Genesis' step with no controls handed over
        rec["raw_scene_step_steps_per_s"] = rate("raw_scene_step")
        rec["overhead_vs_scene_step_pct"] = float(np.median(overheads("ours", "raw_scene_step")))
    if "ours_eager" in times:
        rec["ours_eager_steps_per_s"] = rate("ours_eager")
        rec["ours_eager_overhead_pct"] = float(np.median(overheads("ours_eager", "raw")))
    if backend == "brax":  # which DLPack import the adapter's probe chose (see envs/brax_env.py)
        rec["action_import"] = "jaxlib" if env._import is not None else "jax.dlpack.from_dlpack"
    if "raw_default_xla" in times:
        rec["raw_default_xla_steps_per_s"] = rate("raw_default_xla")
        rec["vs_raw_default_xla"] = paired("ours", "raw_default_xla")
    gyms = [name for name in ("gym_sync", "gym_async") if name in times]
    if gyms:
        vs = {name: paired("ours", name) for name in gyms}
        rec.update({f"{name}_steps_per_s": rate(name) for name in gyms})
        rec["gym_live_env_steps"] = {name: int(live_total[name]) for name in gyms}
        best = max(gyms, key=rate)
        rec["vs_gymnasium"] = {**vs, "baseline": best, "ratio": vs[best]}
        # CPU time per live step, Gymnasium's over ours: what a busy shared machine cannot distort much
        rec["cpu_efficiency_vs_gymnasium"] = {
            name: round(cpu_per_step(name) / cpu_per_step("ours"), 3) for name in gyms
        }
        if "gym_async" not in times:
            rec["vs_gymnasium"]["gym_async"] = (
                f"not run: {n} processes (> --async-max-envs {args.async_max_envs})"
            )
    # CPU cores a loop kept busy (CPU time / wall time): on a shared machine, what it was given. Linux shares
    # the CPU between sessions (autogroup), so one busy neighbour halves a 2-thread loop but not a 1-thread
    # one.
    rec["cores_used"] = {
        name: round(float(np.median([c / t for c, t in zip(cpu[name], times[name], strict=True)])), 2)
        for name in times
    }  # fmt: skip
    rec["cpu_us_per_live_step"] = {name: round(cpu_per_step(name) * 1e6, 2) for name in cpu}
    rec["loops"] = {lp.name: lp.what for lp in loops}
    rec["samples_s"] = {name: [round(t, 4) for t in ts] for name, ts in times.items()}
    rec["load_avg_1min"] = [load0, load1]
    if max(load0, load1) > 0.75 * (os.cpu_count() or 1):
        rec["machine_busy"] = (
            "load average above 0.75 x CPU count: other work shared the cores; see cores_used"
        )
    for lp in loops:
        lp.close()
    env.close()
    return rec


def _versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("torch", "numpy", "mujoco", "gymnasium", "jax", "jaxlib", "brax", "genesis-world"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", nargs="+", default=["mujoco"], choices=genvs.BACKENDS,
                    help="default: mujoco, with Gymnasium's own vector envs as baselines; add gymnasium for "
                         "our Gymnasium adapter's overhead")  # fmt: skip
    ap.add_argument("--tasks", nargs="+", default=None,
                    help="task names (default per backend: hopper walker2d halfcheetah; classic: "
                         "Pendulum-v1 CartPole-v1; brax: hopper; genesis: go2_walk)")  # fmt: skip
    ap.add_argument("--sizes", nargs="+", type=int, default=None,
                    help=f"batch sizes (default: {CPU_SIZES} on the CPU, {GPU_SIZES} on a GPU)")  # fmt: skip
    ap.add_argument("--device", default=None, help="torch device (default: each backend's own)")
    ap.add_argument("--steps", type=int, default=100, help="at most this many steps per rollout")
    ap.add_argument(
        "--repeats", type=int, default=None, help="timed samples per loop (default: 3 CPU, 7 GPU)"
    )
    ap.add_argument("--min-sample-s", type=float, default=0.3, help="a sample is at least this long")
    ap.add_argument("--warmup-s", type=float, default=None,
                    help="untimed interleaved samples for this long first "
                         "(default: 3 s on a GPU, 0 on the CPU)")
    ap.add_argument("--action-scale", type=float, default=None,
                    help="actions: uniform in the bounds (within [-1, 1]) × this "
                         "(default 1; genesis 0.2)")  # fmt: skip
    ap.add_argument("--async-max-envs", type=int, default=64,
                    help="time Gymnasium's AsyncVectorEnv (one process per env) "
                         "up to this many envs")  # fmt: skip
    ap.add_argument("--async-max-concurrency", type=int, default=os.cpu_count() or 1,
                    help="AsyncVectorEnv max_concurrency (default: the CPU count; 0: no limit)")  # fmt: skip
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    info: dict[str, Any] = {
        "machine": platform.node(), "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "versions": _versions(),
        "counting": COUNTING, "load_avg_1min_at_start": _load(),
    }  # fmt: skip
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    results = []
    for backend in args.backends:
        on_gpu = (args.device or "").startswith("cuda") or (args.device is None
                                                             and backend in ("brax", "genesis")
                                                             and torch.cuda.is_available())  # fmt: skip
        for task in args.tasks or DEFAULT_TASKS[backend]:
            for n in args.sizes or (GPU_SIZES if on_gpu else CPU_SIZES):
                try:
                    results.append(bench(backend, task, n, args))
                except Exception as exc:  # noqa: BLE001  report and go on with the other sizes
                    results.append({"backend": backend, "task": task, "num_envs": n,
                                    "error": f"{type(exc).__name__}: {exc}"})  # fmt: skip
                print(json.dumps(results[-1]), flush=True)
    info["load_avg_1min_at_end"] = _load()
    print(json.dumps({"info": info, "results": results}, indent=1))


if __name__ == "__main__":
    main()
