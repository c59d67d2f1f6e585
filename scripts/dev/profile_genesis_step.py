"""Where a Genesis step's time goes on a GPU: our step with its after-physics phase replayed as a CUDA graph
of fused (``torch.compile``) kernels, as a graph of the ops one by one, and run op by op, against Genesis' own
loop (PD targets through its API + ``scene.step()``; ``raw_scene_step``: ``scene.step()`` alone, since our
step writes the PD targets into Genesis' buffer itself); ``scene_step+<part>``: ``scene.step()`` and one part
of our step in place (what it costs between Genesis' steps, against what it costs alone); the GPU time of one
replay of each graph; the host time of the step's parts alone.

    python scripts/dev/profile_genesis_step.py --num-envs 1024        # JSON on stdout

Loops are timed interleaved (``--repeats`` rounds, the order reversed every other round), each a rollout of
``--steps`` steps from the same reset with the same actions, synchronised before the clock stops; figures are
medians in microseconds per step. ``--trace`` adds the host's busiest ops and CUDA API calls per step of
Genesis' loops and ours (torch.profiler), to find where a step's host time goes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import gprl.envs as genvs
import numpy as np
import torch
from gprl.envs.genesis_env import _Graphed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # scripts/bench_eval.py: timing helpers
from bench_eval import queued_host_us

Loop = tuple[Callable[[], object], Callable[[], None]]  # untimed start (the reset), timed steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-envs", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--trace", action="store_true", help="also profile the host (torch.profiler) per loop")
    args = ap.parse_args()
    n = args.num_envs
    env = genvs.make("go2_walk", backend="genesis", num_envs=n, device="cuda", episode_length=args.steps + 1)
    task = env.task
    gen = torch.Generator().manual_seed(0)
    bank = [((torch.rand(n, 12, generator=gen) * 2 - 1) * 0.2).cuda() for _ in range(16)]
    targets = [b * task.cfg["action_scale"] + task.default_dof_pos for b in bank]
    env.reset(seed=0)  # captures the fused graph
    fused = env._after
    unfused = _Graphed(env._advance_episodes, fuse=False, then=env._pack)
    unfused.capture()

    def ours(after: _Graphed, graphs: bool) -> Loop:
        def start() -> None:
            env._after, env.cuda_graphs = after, graphs
            env.reset(seed=0)

        def steps() -> None:
            for i in range(args.steps):
                env.step(bank[i % 16])

        return start, steps

    def raw(control: bool) -> Loop:
        def steps() -> None:
            for i in range(args.steps):
                if control:
                    task.robot.control_dofs_position(targets[i % 16], task.dofs)
                task.robot.solver.scene.step()

        return lambda: env.reset(seed=0), steps

    def timed(loop: Loop) -> float:
        start, steps = loop
        start()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        steps()
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    def scene_step_plus(part: Callable[[int], object]) -> Loop:
        """``scene.step()`` and one part of our step, in place:
        what that part costs between Genesis' steps."""

        def steps() -> None:
            for i in range(args.steps):
                task.robot.solver.scene.step()
                part(i)

        return lambda: env.reset(seed=0), steps

    def two_clones() -> tuple[torch.Tensor, ...]:  # the outputs from the unpacked buffers: 2 copies, 4 views
        values, flags = env._values.clone(), env._flags.clone()
        k = n * env.obs_dim
        return values[:k].view(n, env.obs_dim), values[k:], *flags.unbind()

    loops = {"raw": raw(True), "raw_scene_step": raw(False), "ours_fused_graph": ours(fused, True),
             "ours_unfused_graph": ours(unfused, True), "ours_eager": ours(fused, False),
             "scene_step+copy_action_in": scene_step_plus(lambda i: task.action.copy_(bank[i % 16])),
             "scene_step+replay_fused": scene_step_plus(lambda i: fused(replay=True)),
             "scene_step+clone_and_unpack": scene_step_plus(lambda i: env._unpack(env._out.clone())),
             "scene_step+clone": scene_step_plus(lambda i: env._out.clone()),
             "scene_step+two_clones_and_unpack": scene_step_plus(lambda i: two_clones()),
             "scene_step+synchronize": scene_step_plus(lambda i: torch.cuda.synchronize()),
             "scene_step+all_three": scene_step_plus(lambda i: (task.action.copy_(bank[i % 16]),
                                                                fused(replay=True),
                                                                env._unpack(env._out.clone())))}  # fmt: skip
    for loop in loops.values():  # warm-up
        timed(loop)
    times: dict[str, list[float]] = {k: [] for k in loops}
    for r in range(args.repeats):
        for name in list(loops) if r % 2 == 0 else list(loops)[::-1]:
            times[name].append(timed(loops[name]))
    trace = {name: _host_profile(loops[name], args.steps)
             for name in ("raw", "raw_scene_step", "ours_fused_graph")} if args.trace else None  # fmt: skip
    env._after, env.cuda_graphs = fused, True
    us = {k: float(np.median(v)) / args.steps * 1e6 for k, v in times.items()}
    overhead = {f"{k}_vs_{base}": float(np.median([100 * (a - b) / b
                                                   for a, b in zip(v, times[base], strict=True)]))
                for base in ("raw", "raw_scene_step") for k, v in times.items()
                if (k.startswith("ours")
                    or base == "raw_scene_step" and k.startswith("scene_step+"))}  # fmt: skip

    def replay_gpu_us(g: _Graphed, reps: int = 200) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        g(replay=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(reps):
            g(replay=True)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / reps * 1e3

    action = bank[0]
    parts = {name: queued_host_us(fn, calls=200) for name, fn in {
        "copy_action_in": lambda: task.action.copy_(action),
        "genesis_control_dofs_position": lambda: task.robot.control_dofs_position(targets[0], task.dofs),
        "replay_fused": lambda: fused(replay=True),
        "replay_unfused": lambda: unfused(replay=True),
        "clone_and_unpack": lambda: env._unpack(env._out.clone()),
        "checks": lambda: (env._check_action_tensor(action), env._check_continuous_action(action)),
    }.items()}  # fmt: skip
    print(json.dumps({
        "device": torch.cuda.get_device_name(), "num_envs": n, "steps": args.steps, "repeats": args.repeats,
        "us_per_step": us, "overhead_pct": overhead,
        "graph_gpu_us_per_replay": {"fused": replay_gpu_us(fused), "unfused": replay_gpu_us(unfused)},
        "host_us_per_call": parts, "host_profile": trace,
    }))  # fmt: skip


def _host_profile(loop: Loop, steps: int, rows: int = 25) -> list[dict[str, float | str]]:
    """torch.profiler over one rollout's steps: the host's busiest ops and CUDA API calls, per step."""
    from torch.profiler import ProfilerActivity, profile

    start, run = loop
    start()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:rows]
    return [{"name": e.key, "calls_per_step": e.count / steps,
             "self_cpu_us_per_step": e.self_cpu_time_total / steps}
            for e in events]  # fmt: skip


if __name__ == "__main__":
    main()
