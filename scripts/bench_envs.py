"""Environment throughput per backend and batch size, and our adapter's overhead over the raw simulator loop.

Prints JSON (one record per backend × N): environment steps per second through ``gprl.envs`` and through the
simulator's own loop, and the overhead in percent. For the CPU backends, Gymnasium's own vector env
(``gym.make_vec(..., vectorization_mode="sync")``) is the baseline the native MuJoCo backend is compared with.

    python scripts/bench_envs.py --backends mujoco gymnasium --sizes 1 64 1024 --steps 50
    python scripts/bench_envs.py --backends brax genesis --device cuda --sizes 1 64 1024 8192 32768
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from typing import Any

import gprl.envs as genvs
import numpy as np
import torch

TASKS = {"gymnasium": "halfcheetah", "mujoco": "halfcheetah", "brax": "hopper", "genesis": "go2_walk"}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time(fn: Callable[[], Any], steps: int, warmup: int, sync: Callable[[], None], repeats: int) -> float:
    for _ in range(warmup):
        fn()
    sync()
    best = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        sync()
        best.append(time.perf_counter() - t0)
    return float(np.median(best))


def _raw_loop(env: genvs.VecEnv, actions: torch.Tensor) -> tuple[Callable[[], Any], Callable[[], None]]:
    """One step of the simulator alone, fed with a ready action (no validation, rewards or observations)."""
    if env.backend == "mujoco":
        act = actions.double().numpy()
        sim, fs = env.sim, env.frame_skip

        def step() -> None:
            sim.ctrl[:] = act
            sim.step(None, fs)

        return step, lambda: None
    if env.backend == "gymnasium":
        import gymnasium as gym

        vec = gym.make_vec(env.name, num_envs=env.num_envs, vectorization_mode="sync")
        vec.reset(seed=0)
        act = actions.numpy()
        return (lambda: vec.step(act)), lambda: None
    if env.backend == "brax":
        jax = env._jax
        state = {"s": env._state}
        ja = env.to_jax(actions.contiguous())

        def step() -> None:
            state["s"] = env._step_fn(state["s"], ja)

        return step, lambda: jax.block_until_ready(state["s"].obs)
    task = env.task  # genesis

    def gstep() -> None:
        task.robot.control_dofs_position(actions * 0.25 + task.default_dof_pos, task.motors)
        task.robot.solver.scene.step()

    return gstep, lambda: _sync(env.device)


def bench(backend: str, n: int, device: str | None, steps: int, task: str | None) -> dict[str, Any]:
    name = task or TASKS[backend]
    kw = {"device": device} if device else {}
    env = genvs.make(name, backend=backend, num_envs=n, episode_length=10**6, **kw)
    env.reset(seed=0)
    gen = torch.Generator().manual_seed(0)
    actions = (torch.rand(n, env.act_dim, generator=gen) * 2 - 1).to(env.device)
    if env.backend == "genesis":
        actions = actions * 0.2  # small PD offsets: the robot stays up, nothing terminates
    ours = _time(lambda: env.step(actions), steps, 3, lambda: _sync(env.device), 3)
    raw_step, raw_sync = _raw_loop(env, actions)
    raw = _time(raw_step, steps, 3, raw_sync, 3)
    rec = {
        "backend": backend, "task": name, "device": str(env.device), "num_envs": n, "steps": steps,
        "steps_per_s": n * steps / ours, "raw_steps_per_s": n * steps / raw,
        "overhead_pct": 100.0 * (ours - raw) / raw,
    }  # fmt: skip
    if backend == "gymnasium":
        rec["raw_is"] = "gymnasium.vector SyncVectorEnv"
    env.close()
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", nargs="+", default=["mujoco", "gymnasium"], choices=genvs.BACKENDS)
    ap.add_argument("--sizes", nargs="+", type=int, default=[1, 64, 1024, 8192, 32768])
    ap.add_argument("--device", default=None, help="torch device (default: each backend's own)")
    ap.add_argument("--steps", type=int, default=50, help="timed steps per repeat")
    ap.add_argument(
        "--task", default=None, help="task name (default: halfcheetah; brax: hopper; genesis: go2_walk)"
    )
    ap.add_argument("--max-env-steps", type=float, default=float("inf"),
                    help="skip a size whose N*steps exceeds this (keeps CPU runs short)")  # fmt: skip
    args = ap.parse_args()
    info = {"machine": platform.node(), "cpu_count": torch.get_num_threads(), "torch": torch.__version__}
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    results = []
    for backend in args.backends:
        for n in args.sizes:
            steps = args.steps
            if n * steps > args.max_env_steps:
                steps = max(2, int(args.max_env_steps // n))
            try:
                results.append(bench(backend, n, args.device, steps, args.task))
            except Exception as exc:  # noqa: BLE001  report and go on with the other sizes
                results.append({"backend": backend, "num_envs": n, "error": f"{type(exc).__name__}: {exc}"})
            print(json.dumps(results[-1]), flush=True)
    print(json.dumps({"info": info, "results": results}, indent=1))


if __name__ == "__main__":
    main()
