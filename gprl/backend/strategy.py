"""Evaluation strategies of the kernels, and the cost models that pick one per call.

A strategy names which of the CUDA evaluation kernels (``kernels/eval_cuda.cu``,
``kernels/eval_level_cuda.cu``) a ``fitness`` or ``forward`` call launches, and how many rows each thread
evaluates (ids shared with ``kernels/strategy.h``):

=============  ==========================================================================================
``warp``       ``fitness`` of single-output trees only: one warp per tree over all its rows, the tree (and,
               when small, the data) staged in shared memory; rows per lane from the dataset size
``hybrid_r1``  one block per (tree, segment of rows), the tree staged per block, 1 row per thread
``hybrid_r2``  the same with 2 rows per thread
``hybrid_r4``  the same with 4 rows per thread (large datasets)
``level``      one block per (tree, segment of up to 64 rows) evaluating one depth level of the tree at a
               time, every node of the level for every row at once: a tree costs as many dependent steps
               as it is deep, not as it is long (few trees, few rows: the latency of the longest tree)
=============  ==========================================================================================

``fitness`` takes all five, ``forward`` all but ``warp``; ``forward_batched`` has one mapping. Every
strategy applies the same node functions to the same operands, so the choice is about speed only (fused
losses differ only in the fixed order of their sums). Trees that need an evaluation stack deeper than 256
run 1 row per thread under every hybrid strategy; multi-output ``fitness`` is limited to
``threads * rows * n_out * 4`` bytes of shared memory (96 KiB): a hybrid strategy over it is unavailable
(the built-in heuristic falls back); ``level`` keeps ~32 bytes per node slot, plus 4 per node slot and row,
in shared memory and takes ``max_len`` up to 1024 (it fits every GPU with 64 KiB of shared memory per block).

The CPU kernels have two mappings of ``fitness`` and ``forward``, which give the same bits:

=============== ========================================================================================
``interpreter`` each tree interpreted over chunks of 256 rows (the CUDA names run it too on the CPU)
``shared``      the population's distinct subtrees (``kernels/subtrees.h``: equal node for node, anywhere
                in the population) each evaluated once per row, then each tree's outputs read from them
=============== ========================================================================================

Which one runs (first match wins): the call's ``strategy=`` argument; :func:`set_strategy` (initially the
``GPRL_STRATEGY`` environment variable; it applies to the calls that can run that strategy); else ``auto``.
``auto`` on a CUDA device: an op's first call on a device measures every strategy on a grid of population
sizes and row counts (single calls between CUDA events; cached as JSON under the gprl cache directory, keyed
by device name, kernel build and torch version), predicts a call's time by interpolating that table in log
space, takes the fastest, and memoises the decision per (op, device, P, D, n_out), shared by populations
within ~25% in size. If calibration fails, gprl warns once and uses the kernels' built-in heuristic (id -1).
``auto`` on the CPU: ``shared`` from 1,024 rows where the population's graph of distinct subtrees (its build
and a row of each distinct node) is estimated to cost less than interpreting every tree, else the interpreter:
a population of a regression run repeats most of its subtrees (about half of its function nodes at the first
generation, nine tenths by the hundredth), a random one about a third.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Sequence

import torch

from gprl.core import functions as F
from gprl.core.encoding import METHODS, stack_depth
from gprl.core.seeds import seed_from

AUTO = -1
# kernels/strategy.h (0 is free)
IDS = {"warp": 1, "hybrid_r1": 2, "hybrid_r2": 3, "hybrid_r4": 4, "level": 5, "shared": 6, "interpreter": 7}
CPU_STRATEGIES = ("interpreter", "shared")  # the CPU's own mappings, of both ops
OP_STRATEGIES = {
    "fitness": ("level", "warp", "hybrid_r1", "hybrid_r2", "hybrid_r4"),
    "forward": ("level", "hybrid_r1", "hybrid_r2", "hybrid_r4"),
}
HYBRID_ROWS = {"hybrid_r1": 1, "hybrid_r2": 2, "hybrid_r4": 4}
MULTI_OUTPUT_SMEM_LIMIT = 96 * 1024  # kernels/strategy.h
# level strategy: ~36 bytes per node slot (one row) fit 64 KiB of shared memory (LevelLayout)
LEVEL_MAX_LEN = 1024
_OP_IDS = {op: {n: IDS[n] for n in (*names, *CPU_STRATEGIES)} for op, names in OP_STRATEGIES.items()}

# Probe grid: trees P x rows per tree D, a factor 4 apart. Cells above MAX_PROBE_WORK (P * D) are not
# timed: there the GPU is saturated (16M rows are ~15 waves of an H100) and time grows with the work,
# which is how the model extrapolates beyond its largest probes.
PROBE_P = (64, 256, 1024, 4096, 16384, 131072)
PROBE_D = (16, 64, 256, 1024, 4096, 16384, 65536)
MAX_PROBE_WORK = 1 << 24
PROBE_FUNCTIONS = ("add", "sub", "mul", "div", "sin", "cos", "tan")  # scripts/bench_eval.py's set
# Multi-output cost: each strategy is also timed with PROBE_OUTPUTS outputs on a few (P, D) cells.
PROBE_OUTPUTS = 4
OUTPUT_CELLS = ((1024, 64), (1024, 4096), (16384, 64), (16384, 512))
CACHE_FORMAT = 1

# time_fn(op, strategy, P, D, n_out, limit) -> seconds per call (None: the strategy failed)
TimeFn = Callable[[str, str, int, int, int, float], "float | None"]


def names(op: str) -> tuple[str, ...]:
    """The CUDA strategies of `op` ("fitness" or "forward")."""
    return OP_STRATEGIES[op]


def _invalid(op: str, name) -> ValueError:
    return ValueError(f"strategy={name!r} is not a strategy of {op}; choose one of "
                      f"{['auto', *OP_STRATEGIES[op]]} (CUDA) or {list(CPU_STRATEGIES)} (CPU)")


def hybrid_threads(D: int, rows: int) -> int:
    """Threads per block of a hybrid strategy's multi-output fitness (shared_mode_shape in
    kernels/eval_cuda.cu)."""
    per_thread = -(-D // rows)
    return min(128, -(-per_thread // 32) * 32)


def unavailable(op: str, name: str, D: int, n_out: int, max_len: int = 1) -> str | None:
    """Why strategy `name` of `op` cannot evaluate D rows of n_out outputs of trees padded to max_len on a
    CUDA device (None: it can).

    The kernels raise the same errors (kernels/strategy.h, fitness_cuda)."""
    if name in CPU_STRATEGIES:
        return (f"strategy {name!r} evaluates on the CPU only; on a CUDA device choose one of "
                f"{['auto', *OP_STRATEGIES[op]]}")
    if name == "level" and max_len > LEVEL_MAX_LEN:
        return (f"strategy 'level' takes max_len up to {LEVEL_MAX_LEN} (its trees' values live in shared "
                f"memory), got {max_len}; choose 'auto' or a hybrid strategy")
    if name == "warp" and n_out != 1:
        return (f"strategy 'warp' evaluates single-output trees only (n_out={n_out}); choose one of "
                f"{['auto', *(s for s in OP_STRATEGIES[op] if s != 'warp')]}")
    if op == "fitness" and n_out > 1 and name in HYBRID_ROWS:
        rows = HYBRID_ROWS[name]
        need = hybrid_threads(D, rows) * rows * n_out * 4
        if need > MULTI_OUTPUT_SMEM_LIMIT:
            return (f"strategy {name!r} needs {need} bytes of shared memory for {n_out} outputs, over the "
                    f"{MULTI_OUTPUT_SMEM_LIMIT} byte limit; choose 'auto' "
                    "(it falls back to fewer rows and threads)"
                    + (" or a hybrid strategy with fewer rows per thread" if rows > 1 else ""))
    return None


# ---- overrides ----
_override: str | None = None


def set_strategy(name: str | None) -> None:
    """Forces one strategy for every op that has it (others choose automatically); None or "auto" resets.

    For benchmarks; a call's own ``strategy=`` argument still wins.
    """
    global _override
    if name is not None and name != "auto" and name not in IDS:
        raise ValueError(f"strategy={name!r} is not a strategy; choose one of {['auto', *IDS]}")
    _override = None if name == "auto" else name


def get_strategy() -> str | None:
    """The global override (None: automatic)."""
    return _override


_env = os.environ.get("GPRL_STRATEGY")
if _env:
    if _env != "auto" and _env not in IDS:
        raise ValueError(f"GPRL_STRATEGY={_env!r} is not a strategy; set one of {['auto', *IDS]} or unset it")
    set_strategy(_env)


# ---- the cost model ----
class CostModel:
    """Predicted seconds per call from calibration tables, one per op::

        {"P": [...], "D": [...], "mean_len": 27.0, "seconds": {strategy: [[t or None] per D] per P},
         "n_out": 4, "output_factor": {strategy: t(4 outputs) / t(1 output)}}

    Single-output time: inside the probe grid log(time) is bilinear in (log P, log D); beyond its largest
    P or D time grows in proportion to the work (a saturated GPU); below its smallest it stays at the
    smallest probe's (launch and latency bound). Cells left out of the calibration are filled the same way
    from their measured neighbours. n outputs multiply it by output_factor ** log_4(n) (each strategy's own
    measured geometric-mean ratio). Mean tree length scales every strategy alike: it changes predictions,
    not choices.
    """

    def __init__(self, tables: dict[str, dict]):
        self.tables = tables
        self._log: dict[tuple[str, str], list[list[float]]] = {}
        for op, table in tables.items():
            for name, grid in table["seconds"].items():
                self._log[op, name] = _filled_log(table["P"], table["D"], grid)

    def has(self, op: str) -> bool:
        return op in self.tables

    def predict(self, op: str, strategy: str, P: int, D: int, n_out: int = 1,
                mean_len: float | None = None, max_len: int = 1) -> float:
        table = self.tables[op]
        logt = self._log.get((op, strategy))
        if logt is None or unavailable(op, strategy, D, n_out, max_len) is not None:
            return math.inf
        gp, gd = table["P"], table["D"]
        scale = 1.0
        if P > gp[-1]:
            scale *= P / gp[-1]
        if D > gd[-1]:
            scale *= D / gd[-1]
        if mean_len is not None:
            scale *= mean_len / table["mean_len"]
        if n_out > 1 and strategy in table.get("output_factor", {}):
            scale *= table["output_factor"][strategy] ** (math.log(n_out) / math.log(table["n_out"]))
        i, fx = _locate(gp, P)
        j, fy = _locate(gd, D)
        i1, j1 = min(i + 1, len(gp) - 1), min(j + 1, len(gd) - 1)
        corners = (logt[i][j], logt[i1][j], logt[i][j1], logt[i1][j1])
        if math.inf in corners:  # a strategy that failed a neighbouring probe
            return math.inf
        v = (1 - fx) * (1 - fy) * corners[0] + fx * (1 - fy) * corners[1] + (1 - fx) * fy * corners[2] \
            + fx * fy * corners[3]
        return math.exp(v) * scale

    def best(self, op: str, P: int, D: int, n_out: int = 1, max_len: int = 1) -> str | None:
        """The strategy with the smallest predicted time (ties: the first in ``names(op)``); None when no
        strategy is available (or every one failed its probes): the kernels' built-in heuristic then."""
        times = [(self.predict(op, s, P, D, n_out, max_len=max_len), s) for s in OP_STRATEGIES[op]]
        t, s = min(times, key=lambda ts: ts[0])
        return s if t < math.inf else None


def _locate(grid: Sequence[float], x: float) -> tuple[int, float]:
    """Index i and fraction f in log space with grid[i] <= x <= grid[i + 1] (clamped to the grid)."""
    if x <= grid[0] or len(grid) == 1:
        return 0, 0.0
    if x >= grid[-1]:
        return len(grid) - 1, 0.0
    i = bisect.bisect_right(grid, x) - 1
    return i, math.log(x / grid[i]) / math.log(grid[i + 1] / grid[i])


def _filled_log(gp: Sequence[int], gd: Sequence[int], grid: list[list]) -> list[list[float]]:
    """log(seconds) with missing cells filled from the smaller-P (else smaller-D) neighbour by work
    scaling."""
    t = [[None if v is None or not v > 0 else float(v) for v in row] for row in grid]
    for i in range(len(gp)):
        for j in range(len(gd)):
            if t[i][j] is None and i > 0 and t[i - 1][j] is not None:
                t[i][j] = t[i - 1][j] * gp[i] / gp[i - 1]
            elif t[i][j] is None and j > 0 and t[i][j - 1] is not None:
                t[i][j] = t[i][j - 1] * gd[j] / gd[j - 1]
    return [[math.log(v) if v is not None else math.inf for v in row] for row in t]


def calibrate(op: str, time_fn: TimeFn, mean_len: float = 27.0, grid=None,
              max_work: int = MAX_PROBE_WORK) -> dict:
    """Times every strategy of `op` on the probe grid and returns its table (see :class:`CostModel`).

    ``time_fn(op, strategy, P, D, n_out, limit)`` returns seconds per call; once a first call takes longer
    than ``limit`` seconds it may stop refining (the strategy has lost that cell anyway).
    """
    gp, gd = grid or (PROBE_P, PROBE_D)
    seconds = {s: [[None] * len(gd) for _ in gp] for s in OP_STRATEGIES[op]}
    for i, P in enumerate(gp):
        for j, D in enumerate(gd):
            if P * D <= max_work:
                for s, t in _time_cell(op, time_fn, P, D, 1).items():
                    seconds[s][i][j] = t
    ratios: dict[str, list[float]] = {s: [] for s in OP_STRATEGIES[op]}
    for P, D in OUTPUT_CELLS:
        single, multi = _time_cell(op, time_fn, P, D, 1), _time_cell(op, time_fn, P, D, PROBE_OUTPUTS)
        for s, rs in ratios.items():
            if single[s] and multi[s]:
                rs.append(multi[s] / single[s])
    factor = {s: math.exp(statistics.fmean(math.log(r) for r in rs)) for s, rs in ratios.items() if rs}
    return {"P": list(gp), "D": list(gd), "mean_len": mean_len, "seconds": seconds, "n_out": PROBE_OUTPUTS,
            "output_factor": factor}


def _time_cell(op: str, time_fn: TimeFn, P: int, D: int, n_out: int) -> dict[str, float | None]:
    """Seconds per call of every strategy on one cell (None: unavailable or failed).

    Two passes in opposite orders, each strategy keeping its faster one: a slow moment of the device (a clock
    change, another process) then has to hit a strategy twice to misplace it. (With one pass, one H100
    calibration predicted 1.5-2.5x the measured times at P = 10,000, D = 60 and picked a strategy 27% slower
    than the best there.)
    """
    times: dict[str, float | None] = {s: None for s in OP_STRATEGIES[op]}
    usable = [s for s in reversed(OP_STRATEGIES[op]) if unavailable(op, s, D, n_out) is None]
    failed: set[str] = set()
    best = math.inf
    # block mappings first: their time lets a slow warp mapping stop early
    for order in (usable, usable[::-1]):
        for s in order:
            if s in failed:
                continue
            t = time_fn(op, s, P, D, n_out, 4 * best)
            if t is None:
                failed.add(s)
                times[s] = None
                continue
            times[s] = t if times[s] is None else min(times[s], t)
            best = min(best, t)
    return times


# ---- calibration on a CUDA device ----
class _Probes:
    """Random trees and data of the benchmark's kind (scripts/bench_eval.py) on a device, sliced per probe."""

    def __init__(self, device: torch.device):
        from gprl.backend.ops import ops

        gen = torch.Generator().manual_seed(0)
        weights = F.function_weights(list(PROBE_FUNCTIONS))
        w = torch.tensor(weights, dtype=torch.float32, device=device)
        # Population.random's default: 8 variables + constants
        leaf_prob = F.default_leaf_prob(8, 0.2, weights)  # as Population.random: 8 inputs, constants
        # ramped trees of depth 3..8, up to 256 nodes (Population.random's generator, called directly)
        self.trees = {n_out: ops.generate(w, P, 256, 8, n_out, METHODS["ramped"], 3, 8, leaf_prob, 0.2, -1.0,
                                          1.0, 0.3, seed_from(0))
                      for n_out, P in ((1, max(PROBE_P)), (PROBE_OUTPUTS, max(P for P, _ in OUTPUT_CELLS)))}
        self.mean_len = float(self.trees[1][4][:, 0].float().mean())
        self.stack = max(stack_depth(t[0], t[1]) for t in self.trees.values())
        self.X = (torch.rand(max(PROBE_D), 8, generator=gen) * 2 - 1).to(device)
        self.y = torch.rand(PROBE_OUTPUTS, max(PROBE_D), generator=gen).to(device)
        self.data: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}

    def call(self, op: str, strategy: str, P: int, D: int, n_out: int) -> Callable[[], torch.Tensor]:
        from gprl.backend.ops import ops

        t = tuple(x[:P] for x in self.trees[n_out])
        sid = IDS[strategy]
        if (D, n_out) not in self.data:  # a Dataset's layout: contiguous [n_in, D] and [n_out, D]
            self.data[D, n_out] = (self.X[:D].t().contiguous(), self.y[:n_out, :D].contiguous())
        Xt, yt = self.data[D, n_out]
        if op == "forward":  # Population.forward passes a contiguous [n_in, D] too
            return lambda: ops.forward(*t, Xt, n_out, self.stack, sid)
        return lambda: ops.fitness(*t, Xt, yt, None, 0, self.stack, sid)


def _cuda_time_fn(probes: _Probes) -> TimeFn:
    def time_fn(op: str, strategy: str, P: int, D: int, n_out: int, limit: float) -> float:
        fn = probes.call(op, strategy, P, D, n_out)
        fn()  # warm-up: lazy kernel loading, allocator
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(5):  # single calls, as a user's call sees them: launch + kernel
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
            if times[0] > limit or times[0] > 0.02:
                break
        return statistics.median(times)

    return time_fn


def _cache_path(device_name: str) -> tuple[os.PathLike, dict]:
    from gprl.backend import build as _build

    key = {"device": device_name, "kernels": _build.build_id(), "torch": torch.__version__}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return _build.cache_dir() / "strategy" / f"{digest}.json", key


def load_tables(device_name: str) -> dict[str, dict]:
    """The cached calibration tables of a device ({} when none match this kernel build and torch)."""
    path, key = _cache_path(device_name)
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}
    if doc.get("format") != CACHE_FORMAT or any(doc.get(k) != v for k, v in key.items()):
        return {}
    return doc.get("tables", {})


def save_tables(device_name: str, tables: dict[str, dict]) -> None:
    """Writes the tables atomically (concurrent processes each write a whole file)."""
    path, key = _cache_path(device_name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"format": CACHE_FORMAT, **key, "tables": tables}, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


# Test hook: a function of the device index giving (time_fn, mean tree length) replaces the CUDA probes.
_time_fn_factory: Callable[[int], tuple[TimeFn, float]] | None = None

_lock = threading.Lock()
_models: dict[int, CostModel] = {}  # per CUDA device index
_failed: set[tuple[int, str]] = set()  # (device, op) whose calibration failed: heuristic, warned once
_memo: dict[tuple, int] = {}


def model(device: torch.device | str, op: str | None = None) -> CostModel:
    """The device's cost model; calibrates `op` first (once) when its table is neither loaded nor cached.

    A failed calibration is reported by one warning and leaves `op` out of the model.
    """
    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _lock:
        m = _models.get(index)
        if m is not None and (op is None or m.has(op) or (index, op) in _failed):
            return m
        name = _device_name(index)
        tables = load_tables(name)  # another process may have calibrated meanwhile
        if m is not None:
            tables = {**m.tables, **tables}
        if op is not None and op not in tables:
            # seconds, once per device and kernel build: say why this call is slow (inside a time_limit)
            print(f"gprl: calibrating the {op} strategies of the CUDA kernels on {name} once (cached in "
                  f"{os.path.dirname(_cache_path(name)[0])})", file=sys.stderr, flush=True)
            try:
                tables[op] = _calibrate_on(index, op)
            except Exception as e:  # noqa: BLE001  never fail a user's call over a speed choice
                _failed.add((index, op))
                warnings.warn(f"gprl: calibrating the {op} strategies on {name} failed "
                              f"({type(e).__name__}: {e}); using the built-in heuristic", RuntimeWarning,
                              stacklevel=2)
            else:
                try:
                    save_tables(name, tables)
                except OSError as e:  # the choice stands for this process; the next one calibrates again
                    warnings.warn(f"gprl: could not cache the strategy calibration ({e})", RuntimeWarning,
                                  stacklevel=2)
        m = _models[index] = CostModel(tables)
        return m


def _calibrate_on(index: int, op: str) -> dict:
    if _time_fn_factory is not None:
        time_fn, mean_len = _time_fn_factory(index)
        return calibrate(op, time_fn, mean_len)
    with torch.cuda.device(index):
        probes = _Probes(torch.device("cuda", index))
        return calibrate(op, _cuda_time_fn(probes), probes.mean_len)


def _p_bucket(P: int) -> int:
    """Quarter octaves (the two bits after the leading one): populations within ~25% share a decision."""
    if P <= 0:
        return 0
    b = P.bit_length()
    return 4 * b + ((P << 2) >> (b - 1) & 3)


def _bucket_size(bucket: int) -> int:
    """The smallest P of a bucket (P itself for powers of two)."""
    b, q = divmod(bucket, 4)
    return ((4 + q) << (b - 1)) >> 2 if b > 0 else 0


def auto(op: str, device: torch.device, P: int, D: int, n_out: int = 1, max_len: int = 1) -> str | None:
    """The automatic choice by name (None: the built-in heuristic, on the CPU or after a failed
    calibration)."""
    sid = choose(op, "auto", device, P, D, n_out, max_len)
    return None if sid == AUTO else next(n for n, i in _OP_IDS[op].items() if i == sid)


def choose(op: str, name: str | None, device: torch.device, P: int, D: int, n_out: int = 1,
           max_len: int = 1) -> int:
    """The strategy id an op call over P trees padded to max_len and D rows runs with (hot path: one dict
    lookup once decided)."""
    if name is None:
        name = _override
        if name is not None and (name not in _OP_IDS[op] or (device.type == "cuda" or name == "warp")
                                 and unavailable(op, name, D, n_out, max_len) is not None):
            name = None  # a global override of a strategy this call cannot run
    if name is not None and name != "auto":
        sid = _OP_IDS[op].get(name) if isinstance(name, str) else None
        if sid is None:
            raise _invalid(op, name)
        # the id rules of every device (warp: one output); shared memory bounds only on a CUDA device
        why = unavailable(op, name, D, n_out, max_len) if device.type == "cuda" or name == "warp" else None
        if why is not None:
            raise ValueError(why)
        return sid
    if device.type != "cuda":
        return AUTO
    sid = _memo.get((op, device.index, P, D, n_out, max_len))  # a GP loop repeats the same shapes
    if sid is None:
        sid = _decide(op, device, P, D, n_out, max_len)
    return sid


def _decide(op: str, device: torch.device, P: int, D: int, n_out: int, max_len: int) -> int:
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        return AUTO  # no timing inside a CUDA graph capture; decide on a later call
    bucket = (op, device.index, "bucket", _p_bucket(P), D, n_out, max_len)
    sid = _memo.get(bucket)
    if sid is None:
        m = model(device, op)
        best = m.best(op, max(1, _bucket_size(bucket[3])), D, n_out, max_len) if m.has(op) else None
        sid = AUTO if best is None else IDS[best]
        _memo[bucket] = sid
    if len(_memo) > 1 << 16:  # many distinct shapes: start over rather than grow without bound
        _memo.clear()
    _memo[op, device.index, P, D, n_out, max_len] = sid
    return sid


def reset() -> None:
    """Forgets models, failures and memoised decisions (the cache files stay)."""
    with _lock:
        _models.clear()
        _failed.clear()
        _memo.clear()
