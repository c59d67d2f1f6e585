"""Where the Brax adapter's step time goes on a GPU: the simulator, the fused masking, the DLPack exchange.

A Brax step holds the host (XLA runs the physics' while loops with a host round trip per iteration), so
everything the adapter adds to a step adds to its wall time. This times, interleaved (the order reversed every
round) and each sample after ``reset(seed=0)``, loops that add one part of the adapter at a time to the raw
``jit(vmap(env.step))`` loop, on actions prepared beforehand (torch tensors; their JAX imports for the loops
that do not import):

* ``raw``: ``jit(vmap(env.step))``; ``fused_only``: our fused jitted step (clip, step, masking, packing), no
  exchange; ``ours``: ``env.step`` (fused step, one import, two exports); ``base``: the base-class path
  (``VecEnv.step``: raw step, three exports, masking in torch)
* ``raw_import`` / ``fused_import``: plus the action's import each step; ``raw_export`` / ``fused_export``:
  plus the observation's and the reward's (packed buffer's) export each step; ``fused_both``: both, i.e.
  ``ours`` without its checks, flag bookkeeping and views
* ``public_import``: ``ours`` with the action imported through the public ``jax.dlpack.from_dlpack`` (the
  adapter's fallback when jaxlib's own import is unavailable, see ``envs/brax_env.py``)
* ``sync_import`` / ``sync_export`` / ``sync_both``: ``ours`` with the exchange ordered by the host instead of
  by stream events (torch's stream synchronised before the import; the export waits on the host)
* ``raw_import_unordered``: ``raw_import`` without any stream ordering (timing only: the actions are ready
  before the loop); ``raw_import_same_stream``: ``raw_import`` with torch's current stream set to the stream
  JAX imports on (nothing to order between streams)
* ``ours_keep`` / ``raw_import_keep``: ``ours`` / ``raw_import`` with each step's imported arrays and exported
  views kept alive for KEEP more steps (does releasing them right away make either side wait?)

Also the host cost of each piece per call, and whether a raw step's dispatch returns before the GPU is done.
Prints one JSON line (``BRAX {...}``). With ``--trace`` it also records a few steps of each loop with the
torch profiler (CUPTI sees JAX's GPU work too) and adds, per loop and step: host time, GPU busy time, kernels,
copies, and the CUDA runtime and driver calls that took the host's time (their sequence in one step, repeats
merged).

Every loop runs the adapter's jitted functions, compiled with its options (CUDA graphs of any length;
``--no-cuda-graphs``: JAX's defaults, and whatever ``XLA_FLAGS`` says).

    python scripts/dev/profile_brax_exchange.py --num-envs 8192 [--loops raw ours fused_only] [--trace]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import gprl.envs as genvs
import jax
import torch
import torch.utils.dlpack
from gprl.envs.base import VecEnv

BANK = 16
KEEP = 8


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="hopper")
    ap.add_argument("--num-envs", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=50, help="steps a sample")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop sampling after this many seconds")
    ap.add_argument("--loops", nargs="+", default=None, help="loops to time (default: all)")
    ap.add_argument("--trace", action="store_true", help="also summarise a profiler trace of each loop")
    ap.add_argument("--no-cuda-graphs", action="store_true",
                    help="compile with JAX's defaults (cuda_graphs=False)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("profile_brax_exchange.py needs a CUDA device")
    n = args.num_envs
    env = genvs.make(args.task, backend="brax", num_envs=n, device="cuda", seed=0,
                     cuda_graphs=not args.no_cuda_graphs)
    gen = torch.Generator(device="cuda").manual_seed(0)
    bank = [torch.rand(n, env.act_dim, device="cuda", generator=gen) * 2 - 1 for _ in range(BANK)]
    jbank = [env.to_jax(b) for b in bank]
    ready_stream = env.jax_device.get_stream_for_external_ready_events()
    from jax._src.lib import _jax  # private API: the unordered import only, a diagnostic

    def public_import(t):
        return jax.dlpack.from_dlpack(t.contiguous())

    def unordered_import(t):  # jaxlib's import told nothing is pending: no stream ordering
        return _jax.dlpack_managed_tensor_to_buffer(torch.utils.dlpack.to_dlpack(t), env.jax_device,
                                                    None, None, 2)

    def sync_import(t):
        torch.cuda.current_stream().synchronize()  # the ordering done on the host
        return unordered_import(t)

    def on_ready_stream(loop):
        def call(steps):
            with torch.cuda.stream(torch.cuda.ExternalStream(ready_stream)):
                loop(steps)
        return call

    def sync_export(x, stream):
        return torch.utils.dlpack.from_dlpack(x.__dlpack__(stream=None))  # None: JAX waits on the host

    def sync() -> None:
        jax.block_until_ready(env._state)
        torch.cuda.synchronize()

    kept: collections.deque = collections.deque(maxlen=2 * KEEP)

    def keeping(fn):
        def call(*a):
            out = fn(*a)
            kept.append(out)
            return out
        return call

    def ours(steps, imp=None, exp=None):
        if imp:
            env.to_jax = imp
        if exp:
            env.to_torch = exp
        try:
            for i in range(steps):
                env.step(bank[i % BANK])
        finally:
            env.__dict__.pop("to_jax", None), env.__dict__.pop("to_torch", None)

    def raw(steps, imported=False, exported=False, imp=None):
        s, imp = env._state, imp or env.to_jax
        for i in range(steps):
            s = env._step_fn(s, imp(bank[i % BANK]) if imported else jbank[i % BANK])
            if exported:
                stream = env._torch_stream()
                env.to_torch(s.obs, stream), env.to_torch(s.reward, stream)
        env._state = s

    def fused(steps, imported=False, exported=False):
        s, f, at_limit = env._state, env._fused_fn, env._at_limit[False]
        term, trunc = env.to_jax(env._terminated), env.to_jax(env._truncated)
        for i in range(steps):
            action = env.to_jax(bank[i % BANK]) if imported else jbank[i % BANK]
            s, term, trunc, packed = f(s, term, trunc, at_limit, action)
            if exported:
                stream = env._torch_stream()
                env.to_torch(s.obs, stream), env.to_torch(packed, stream)
        env._state = s

    def base(steps):
        for i in range(steps):
            VecEnv.step(env, bank[i % BANK])

    loops = {
        "raw": raw, "fused_only": fused, "ours": ours, "base": base,
        "raw_import": lambda T: raw(T, imported=True), "raw_export": lambda T: raw(T, exported=True),
        "fused_import": lambda T: fused(T, imported=True), "fused_export": lambda T: fused(T, exported=True),
        "fused_both": lambda T: fused(T, imported=True, exported=True),
        "public_import": lambda T: ours(T, imp=public_import),
        "sync_import": lambda T: ours(T, imp=sync_import),
        "sync_export": lambda T: ours(T, exp=sync_export),
        "sync_both": lambda T: ours(T, imp=sync_import, exp=sync_export),
        "ours_keep": lambda T: ours(T, imp=keeping(env.to_jax), exp=keeping(env.to_torch)),
        "raw_import_keep": lambda T: raw(T, imported=True, imp=keeping(env.to_jax)),
        "raw_import_unordered": lambda T: raw(T, imported=True, imp=unordered_import),
        "raw_import_same_stream": on_ready_stream(lambda T: raw(T, imported=True)),
    }  # fmt: skip
    names = ["raw"] + [k for k in (args.loops or loops) if k != "raw"]
    for name in names:  # compilation and warm-up
        env.reset(seed=0)
        sync()
        loops[name](5)
        sync()
    samples: dict[str, list[float]] = {k: [] for k in names}
    end = time.time() + args.budget_s
    rounds = 0
    while rounds < args.rounds and time.time() < end:
        for name in names if rounds % 2 == 0 else names[::-1]:
            env.reset(seed=0)
            sync()
            t0 = time.perf_counter()
            loops[name](args.steps)
            sync()
            samples[name].append((time.perf_counter() - t0) / args.steps * 1e3)
        rounds += 1

    def per_call_us(fn, calls: int = 200) -> float:
        fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        us = (time.perf_counter() - t0) / calls * 1e6
        sync()
        return round(us, 1)

    env.reset(seed=0)
    sync()
    obs, stream = env._state.obs, env._torch_stream()
    s = env._state
    t0 = time.perf_counter()
    s2 = env._step_fn(s, jbank[0])
    t1 = time.perf_counter()
    jax.block_until_ready(s2)
    t2 = time.perf_counter()
    out = {
        "device": torch.cuda.get_device_name(), "task": args.task, "N": n, "jax": jax.__version__,
        "compiler_options": env.compiler_options, "jaxlib_import": env._import is not None, "rounds": rounds,
        "steps_per_sample": args.steps,
        "ms_per_step_median": {k: round(statistics.median(v), 3) for k, v in samples.items()},
        "overhead_pct_paired": {k: round(statistics.median([(a / b - 1) * 100 for a, b in
                                                            zip(samples[k], samples["raw"])]), 2)
                                for k in names if k != "raw"},
        "samples_ms": {k: [round(x, 2) for x in v] for k, v in samples.items()},
        "pieces_us": {"to_jax": per_call_us(lambda: env.to_jax(bank[0])),
                      "public_import": per_call_us(lambda: public_import(bank[0])),
                      "sync_import": per_call_us(lambda: sync_import(bank[0])),
                      "to_torch": per_call_us(lambda: env.to_torch(obs, stream)),
                      "sync_export": per_call_us(lambda: sync_export(obs, stream)),
                      "torch_stream": per_call_us(env._torch_stream)},
        "raw_step_dispatch_ms": round((t1 - t0) * 1e3, 3), "raw_step_total_ms": round((t2 - t0) * 1e3, 3),
    }  # fmt: skip
    if args.trace:
        out["trace"] = trace_loops({k: loops[k] for k in names}, env, sync)
    print("BRAX", json.dumps(out))


TRACE_STEPS = 8
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
API_CATS = ("cuda_runtime", "cuda_driver")


def trace_loops(loops: dict, env, sync) -> dict:
    """Per loop, what one step costs the host and the GPU, from a torch profiler (CUPTI) trace."""
    from torch.profiler import ProfilerActivity, profile, record_function

    for loop in loops.values():
        env.reset(seed=0)
        sync()
        loop(2)  # warm
    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for name, loop in loops.items():
            env.reset(seed=0)
            sync()
            with record_function(f"loop {name}"):
                loop(TRACE_STEPS)
                sync()
    with tempfile.TemporaryDirectory() as tmp:
        prof.export_chrome_trace(f"{tmp}/trace.json")
        with open(f"{tmp}/trace.json") as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    return {name: _summarise(events, name) for name in loops}


def _summarise(events: list, name: str) -> dict:
    (mark,) = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == f"loop {name}"]
    t0, t1 = mark["ts"], mark["ts"] + mark["dur"]
    inside = [e for e in events if t0 <= e["ts"] <= t1]
    gpu = sorted((e["ts"], e["ts"] + e["dur"]) for e in inside if e.get("cat") in GPU_CATS)
    busy, end = 0.0, t0
    for a, b in gpu:  # union of the GPU's intervals
        busy += max(0.0, b - max(a, end))
        end = max(end, b)
    per_step = 1.0 / TRACE_STEPS
    api: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
    for e in inside:
        if e.get("cat") in API_CATS:
            api[e["name"]][0] += per_step
            api[e["name"]][1] += e["dur"] * per_step
    copies = collections.Counter(e["name"] for e in inside if e.get("cat") in ("gpu_memcpy", "gpu_memset"))
    # one step in the middle of the loop: the host's API calls in order, repeats merged
    width = (t1 - t0) * per_step
    a, b = t0 + width * (TRACE_STEPS // 2), t0 + width * (TRACE_STEPS // 2 + 1)
    sequence: list[list] = []
    for e in sorted((e for e in inside if e.get("cat") in API_CATS and a <= e["ts"] < b),
                    key=lambda e: e["ts"]):
        if sequence and sequence[-1][0] == e["name"]:
            sequence[-1][1] += 1
            sequence[-1][2] += e["dur"]
        else:
            sequence.append([e["name"], 1, e["dur"]])
    return {
        "host_ms_per_step": round((t1 - t0) * per_step / 1e3, 3),
        "gpu_busy_ms_per_step": round(busy * per_step / 1e3, 3),
        "kernels_per_step": round(sum(e.get("cat") == "kernel" for e in inside) * per_step, 1),
        "copies_per_step": {k: round(v * per_step, 2) for k, v in copies.items()},
        "api_per_step": {k: [round(n, 2), round(us, 1)] for k, (n, us) in
                         sorted(api.items(), key=lambda kv: -kv[1][1])[:15]},
        "one_step_api": [[n, c, round(us, 1)] for n, c, us in sequence[:80]],
    }


if __name__ == "__main__":
    main()
