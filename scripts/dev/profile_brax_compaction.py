"""What the Brax adapter's compaction costs and saves: compilation seconds and step time per batch size.

For a task and ``--num-envs`` N, times the adapter's fused step on the whole batch and on each compacted size
of ``BraxEnv.compact_sizes`` (the live episodes moved to a smaller batch; here the first M environments are
the live ones): the seconds its first call takes (compilation; with JAX's persistent cache off, so every size
compiles as on a fresh machine) and the median milliseconds of a step over ``--steps`` steps (uniform random
actions, synchronised before the clock stops). Prints one JSON document.

    python scripts/dev/profile_brax_compaction.py --task walker2d --num-envs 8192
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="walker2d")
    ap.add_argument("--num-envs", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import gprl.envs as genvs
    from gprl.envs.brax_env import _import_jax

    jax = _import_jax()
    jax.config.update("jax_enable_compilation_cache", False)  # every size compiles, as on a fresh machine
    device = "cuda" if torch.cuda.is_available() else "cpu"
    n = args.num_envs
    start = time.perf_counter()
    env = genvs.make(args.task, backend="brax", num_envs=n, device=device, seed=0)
    env._compile_ahead = False  # each size compiled here, timed
    env.reset(seed=0)
    make_s = time.perf_counter() - start
    gen = torch.Generator(device=device).manual_seed(0)
    actions = [torch.rand(n, env.act_dim, device=device, generator=gen) * 2 - 1 for _ in range(8)]
    jnp = jax.numpy
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    record: dict = {"task": args.task, "num_envs": n, "device": name, "make_and_reset_s": make_s,
                    "compile_s": {}, "step_ms": {}}

    def timed(step, label):
        t0 = time.perf_counter()
        jax.block_until_ready(step(0))
        record["compile_s"][label] = time.perf_counter() - t0
        samples = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for i in range(args.steps):
                out = step(i)
            jax.block_until_ready(out)
            samples.append((time.perf_counter() - t0) / args.steps * 1e3)
        record["step_ms"][label] = statistics.median(samples)

    term = trunc = jnp.zeros(n, bool)
    limit = env._at_limit[False]
    state0 = env._state
    imported = [env.to_jax(a) for a in actions]
    timed(lambda i: env._fused_fn(state0, term, trunc, limit, imported[i % 8]), n)
    rows_all = jax.device_put(np.arange(n, dtype=np.int32), env.jax_device)
    for m in env.compact_sizes:
        ended = jnp.arange(n) >= m  # the first m environments live
        t0 = time.perf_counter()
        state, rows = jax.block_until_ready(env._compact_fn(state0, rows_all, ended, trunc, size=m))
        record["compile_s"][f"compact_{m}"] = time.perf_counter() - t0
        timed(lambda i, s=state, r=rows, e=ended: env._fused_rows_fn(s, r, state0.obs, e, trunc, limit,
                                                                      imported[i % 8]), m)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
