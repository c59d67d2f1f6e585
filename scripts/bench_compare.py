"""gprl next to other GP engines on the same workloads; one JSON document and one PNG.

(1) The evaluation grid: SR-fitness throughput, GPops/s = P * mean_size * D / seconds (the EvoGP paper's
    measure, as scripts/bench_eval.py), for random trees of mean size ~27 (ramped half-and-half, depths
    3..8), 8 inputs, {+, -, *, /, sin, cos, tan}, over P x D. Each engine evaluates the whole population by
    its fastest path:
      gprl      Population.fitness on a prepared Dataset (fused MSE), on --device
      pyoperon  EvaluateTrees over trees from its own BalancedTreeCreator (lengths = gprl's), its own
                threads (= --threads); predictions only, its MSE pass is not timed (in pyoperon's favour)
      gplearn   _Program.raw_fitness (execute + weighted MSE) per program, NumPy float32, one process
      deap      gp.compile per tree (as DEAP's evaluate does) + NumPy float32 vectors + MSE, one process
      tensorgp  Engine.calculate_tensors (its engine's evaluation, torch, on --device) + MSE
    gplearn, DEAP and TensorGP get gprl's own trees (converted node for node). A cell whose full
    evaluation would take over --budget seconds is timed on subsets of the population (a fixed random
    sample) and extrapolated when two subset sizes show linear cost ("extrapolated": true), else skipped
    with the reason.
(2) Full runs: --generations generations of --run-pop trees on Pagie-1 and on Feynman I.9.18 with
    --feynman-rows training rows (20% more held out), same function set, tournament selection (size 7),
    crossover 0.8 / mutation 0.2, ramped half-and-half depths 2..6, depth <= 17, length <= 64 where the
    engine bounds length; GPops/s = G * P * mean_size * D / wall seconds (EvoGP's measure), final train and
    test MSE of the best-of-run tree (lowest training MSE).

gprl's CPU backend against pyoperon on the same cores (torch threads = pyoperon threads = --threads) is the
"cpu_vs_pyoperon" part of the JSON.

    python scripts/bench_compare.py --out results/compare_cpu/compare_cpu.json --plot compare_cpu.png
    python scripts/bench_compare.py --engines gprl --device cuda --out gpu.json \
        --merge results/compare_cpu/compare_cpu.json --plot compare.png      # GPU gprl next to the CPU peers
    python scripts/bench_compare.py --no-grid --no-runs --merge a.json b.json --plot ab.png   # plot only
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import math
import os
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's gprl
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_eval's timing helpers

from bench_eval import FUNCTIONS, time_call

import gprl
from gprl import Dataset, GeneticProgramming, Population
from gprl.core.functions import FUNCTIONS as FUNCTION_TABLE
from gprl.sr.objectives import RegressionObjective

ENGINES = ("gprl", "pyoperon", "gplearn", "deap", "tensorgp")
PEER_MODULES = {"pyoperon": "pyoperon", "gplearn": "gplearn", "deap": "deap", "tensorgp": "tensorgp"}
N_IN = 8
PROTECT_EPS = 1e-6  # gprl's protected division threshold (kernels/nodes.h), used by the DEAP primitives


# ---------------------------------------------------------------- machine and versions
def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def progress_log(quiet: bool) -> Callable[[str], None]:
    """Prints progress lines on stderr, or nothing with --quiet."""
    return (lambda msg: None) if quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))


def available(names: list[str], reason_not: Callable[[str], str | None], log: Callable[[str], None]
              ) -> tuple[list[str], dict[str, str]]:
    """The engines that can run, and for each one that cannot, the reason (logged)."""
    engines, skipped = [], {}
    for name in names:
        reason = reason_not(name)
        if reason:
            skipped[name] = reason
            log(f"{name}: skipped ({reason})")
        else:
            engines.append(name)
    return engines, skipped


def machine(threads: int, device: str) -> dict:
    """The machine a benchmark ran on: CPU, cores, threads, GPU (for a CUDA device), platform, load."""
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") else None
    return {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": threads, "gpu": gpu,
            "platform": platform.platform(), "python": platform.python_version(),
            "load_average_at_start": [round(v, 2) for v in os.getloadavg()]}


def engine_version(name: str) -> str | None:
    if name == "gprl":
        return gprl.__version__
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001  (no metadata: the version is unknown, not an error)
        return None


def peer_available(name: str) -> str | None:
    """None when the engine can run here, else the reason it cannot."""
    if name == "gprl":
        return None
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            __import__(PEER_MODULES[name])
    except Exception as e:  # noqa: BLE001  ImportError, or a broken install: either way the peer is skipped
        return f"not installed or not importable ({type(e).__name__}: {e}); pip install {name}"
    return None


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# ---------------------------------------------------------------- gprl trees as prefix token lists
def prefix_tokens(pop: Population, index) -> list[list[tuple]]:
    """Trees as prefix lists of ("f", name) / ("x", variable) / ("c", value) for the converted peers."""
    kind, code, _, value, size = (t.cpu() for t in pop[torch.as_tensor(index)].tensors())
    names = {f.id: f.name for f in FUNCTION_TABLE}
    trees = []
    for k_row, c_row, v_row, n in zip(kind.numpy(), code.numpy(), value.numpy(), size[:, 0].numpy()):
        tree = []
        for k, c, v in zip(k_row[:n] & 3, c_row[:n], v_row[:n]):
            tree.append(("f", names[int(c)]) if k == 3 else ("x", int(c)) if k == 1 else ("c", float(v)))
        trees.append(tree)
    return trees


# ---------------------------------------------------------------- engines: one evaluation of a tree set
class GprlEngine:
    name = "gprl"

    def __init__(self, device: str, threads: int):
        self.device, self.threads = device, threads

    def trees(self, shared: Population, index: np.ndarray):
        sub = shared[torch.as_tensor(index)].to(self.device)
        return sub, sub.lengths().cpu().numpy()

    def data(self, X: np.ndarray, y: np.ndarray):
        return Dataset(torch.from_numpy(X), torch.from_numpy(y), device=self.device)

    def evaluate(self, trees, data) -> None:
        trees.fitness(data)


class PyoperonEngine:
    """Operon's batch evaluator over trees of its own BalancedTreeCreator, matched in length to gprl's."""

    name = "pyoperon"

    def __init__(self, device: str, threads: int, seed: int = 0):
        import pyoperon as op

        self.op, self.threads, self.device = op, threads, "cpu"
        self.rng = op.RandomGenerator(seed)
        self.problem = None
        self._trees: dict[int, object] = {}

    def _setup(self, ds):
        op = self.op
        self.problem = op.Problem(ds)
        cfg = 0
        for t in ("Add", "Sub", "Mul", "Div", "Sin", "Cos", "Tan", "Constant", "Variable"):
            cfg |= int(getattr(op.NodeType, t))
        self.problem.ConfigurePrimitiveSet(cfg)
        variables = sorted(ds.Variables, key=lambda v: v.Index)
        self.inputs = [v.Hash for v in variables[:N_IN]]
        self.pset = self.problem.PrimitiveSet  # the creator keeps references: hold them for its lifetime
        self.creator = op.BalancedTreeCreator(self.pset, self.inputs, 0.0)
        self.coeff = op.NormalCoefficientInitializer()
        self.coeff.ParameterizeDistribution(0.0, 1.0)

    def trees(self, shared: Population, index: np.ndarray):
        if self.problem is None:
            raise RuntimeError("call data() first")
        lengths = shared.lengths().cpu().numpy()
        out = []
        for i in index:  # one tree per gprl tree, of the same target length; cached per index
            t = self._trees.get(int(i))
            if t is None:
                t = self.creator(self.rng, int(lengths[i]), 1, 1000)
                self.coeff(self.rng, t)
                self._trees[int(i)] = t
            out.append(t)
        return out, np.array([t.Length for t in out])

    def data(self, X: np.ndarray, y: np.ndarray):
        values = np.asfortranarray(np.column_stack([X, y]).astype(np.float32))
        ds = self.op.Dataset(values)  # a float32 Fortran array is referenced, not copied: keep it alive
        self._keep = (values, ds)
        if self.problem is None:
            self._setup(ds)
        D = X.shape[0]
        chunk = max(1, (1 << 24) // D)  # predictions of up to 64 MB per call
        return ds, self.op.Range(0, D), np.empty(chunk * D, dtype=np.float32), chunk

    def evaluate(self, trees, data) -> None:
        ds, rng, buf, chunk = data
        D = ds.Rows
        for s in range(0, len(trees), chunk):
            part = trees[s:s + chunk]
            self.op.EvaluateTrees(part, ds, rng, buf[:len(part) * D], self.threads)


class GplearnEngine:
    name = "gplearn"

    def __init__(self, device: str, threads: int):
        from gplearn._program import _Program
        from gplearn.fitness import _fitness_map
        from gplearn.functions import _function_map

        self._Program, self.metric = _Program, _fitness_map["mse"]
        self.fmap = {n: _function_map[n] for n in FUNCTIONS}
        self.device, self.threads = "cpu", 1
        self.arities: dict[int, list] = {}
        for f in self.fmap.values():
            self.arities.setdefault(f.arity, []).append(f)

    def trees(self, shared: Population, index: np.ndarray):
        progs = []
        for tree in prefix_tokens(shared, index):
            program = [self.fmap[v] if k == "f" else v for k, v in tree]
            progs.append(self._Program(list(self.fmap.values()), self.arities, (3, 8), "half and half", N_IN,
                                       (-1.0, 1.0), self.metric, 0.05, 0.001, np.random.RandomState(0),
                                       program=program))
        return progs, np.array([len(p.program) for p in progs])

    def data(self, X: np.ndarray, y: np.ndarray):
        return np.asfortranarray(X), y, np.ones(len(y), dtype=np.float32)  # columns contiguous for X[:, k]

    def evaluate(self, trees, data) -> None:
        X, y, w = data
        with np.errstate(all="ignore"):
            for p in trees:
                p.raw_fitness(X, y, w)


def _pdiv(a, b):
    return np.where(np.abs(b) < PROTECT_EPS, 1.0, np.divide(a, b))


def deap_pset(name: str = "MAIN", n_in: int = N_IN, functions=FUNCTIONS):
    from deap import gp

    pset = gp.PrimitiveSet(name, n_in)
    table = {"add": (np.add, 2), "sub": (np.subtract, 2), "mul": (np.multiply, 2), "div": (_pdiv, 2),
             "sin": (np.sin, 1), "cos": (np.cos, 1), "tan": (np.tan, 1), "exp": (np.exp, 1)}
    for fname in functions:
        pset.addPrimitive(table[fname][0], table[fname][1], name=fname)
    pset.renameArguments(**{f"ARG{k}": f"x{k}" for k in range(n_in)})
    return pset


class DeapEngine:
    name = "deap"

    def __init__(self, device: str, threads: int):
        from deap import gp

        self.gp, self.pset = gp, deap_pset()
        self.device, self.threads = "cpu", 1

    def trees(self, shared: Population, index: np.ndarray):
        gp, pset = self.gp, self.pset
        out = []
        for tree in prefix_tokens(shared, index):
            nodes = [pset.mapping[v] if k == "f" else pset.mapping[f"x{v}"] if k == "x"
                     else gp.Terminal(float(v), False, object) for k, v in tree]
            out.append(gp.PrimitiveTree(nodes))
        return out, np.array([len(t) for t in out])

    def data(self, X: np.ndarray, y: np.ndarray):
        return [np.ascontiguousarray(X[:, k]) for k in range(N_IN)], y

    def evaluate(self, trees, data) -> None:
        cols, y = data
        with np.errstate(all="ignore"):
            for t in trees:  # compiled per evaluation, as DEAP's evaluate functions do
                f = self.gp.compile(t, self.pset)
                np.mean((f(*cols) - y) ** 2)


class TensorgpEngine:
    """TensorGP's engine evaluation (torch): calculate_tensors over the population, then MSE in torch."""

    name = "tensorgp"

    def __init__(self, device: str, threads: int):
        import tensorgp.engine as tg

        self.tg, self.device, self.threads = tg, device, threads
        self.names = {"add": "add", "sub": "sub", "mul": "mult", "div": "div", "sin": "sin", "cos": "cos",
                      "tan": "tan"}

    def _node(self, tree):
        Node = self.tg.Node
        stack = []
        for k, v in reversed(tree):  # prefix -> nodes, children in order
            if k == "f":
                arity = 1 if v in ("sin", "cos", "tan") else 2
                kids = [stack.pop() for _ in range(arity)]
                stack.append(Node(value=self.names[v], children=kids, terminal=False))
            elif k == "x":
                stack.append(Node(value=f"x{v}", children=[], terminal=True))
            else:
                stack.append(Node(value="scalar", children=[float(v)], terminal=True))
        return stack[0]

    def trees(self, shared: Population, index: np.ndarray):
        tokens = prefix_tokens(shared, index)
        return [{"tree": self._node(t)} for t in tokens], np.array([len(t) for t in tokens])

    def data(self, X: np.ndarray, y: np.ndarray):
        D = X.shape[0]
        with torch.device(self.device), contextlib.redirect_stdout(io.StringIO()):
            engine = self.tg.Engine(population_size=1, target_dims=[D], effective_dims=1, no_disk=True,
                                    operators=list(self.names.values()), codomain=[-3.4e38, 3.4e38],
                                    do_polar_mask=False, device=self.device, seed=0, debug=0,
                                    save_graphics=False, initial_test_device=True,
                                    var_func=lambda dims, n: torch.zeros(tuple(dims)))  # replaced below
        torch.set_default_device(None)  # tensorgp.set_device changes the process-wide default
        engine.terminal.set = {f"x{k}": torch.from_numpy(X[:, k].copy()).to(self.device) for k in range(N_IN)}
        chunk = max(1, (1 << 26) // D)  # calculate_tensors keeps every tree's [D] tensor: bound the memory
        return engine, torch.from_numpy(y).to(self.device), chunk

    def evaluate(self, trees, data) -> None:
        engine, y, chunk = data
        with torch.device(self.device):
            for s in range(0, len(trees), chunk):
                tensors, _ = engine.calculate_tensors(trees[s:s + chunk])
                torch.stack([torch.mean((t - y) ** 2) for t in tensors])


ENGINE_CLASSES = {"gprl": GprlEngine, "pyoperon": PyoperonEngine, "gplearn": GplearnEngine,
                  "deap": DeapEngine, "tensorgp": TensorgpEngine}


# ---------------------------------------------------------------- grid
def timed(engine, trees, data, repeats: int, budget: float) -> tuple[float, float | None]:
    """(median wall seconds per call, CPU seconds of this process per call or None on CUDA).

    The CPU time (all threads, spin-waits included) is the fairer figure on a machine shared with other
    jobs, where wall time also measures how much of the cores the scheduler gave away."""
    calls = [0]

    def run():
        calls[0] += 1
        engine.evaluate(trees, data)

    cpu0 = time.process_time()
    seconds = time_call(run, engine.device, repeats, budget)
    cpu = (time.process_time() - cpu0) / calls[0]
    return seconds, (None if engine.device.startswith("cuda") else cpu)


def measure_cell(engine, shared: Population, perm: np.ndarray, X, y, repeats: int, budget: float) -> dict:
    """Seconds for one SR-fitness evaluation of the whole population, measured or extrapolated."""
    P, D = len(shared), X.shape[0]
    data = engine.data(X, y)
    # probe: enough trees for ~50 ms (a fixed per-call cost must not look like per-tree cost), to decide
    # between timing the whole population and extrapolating from subsets
    n = min(P, 8)
    while True:
        trees, sizes = engine.trees(shared, perm[:n])
        engine.evaluate(trees[:1], data)  # warm-up (kernel caches, allocator, lazy imports)
        sync(engine.device)
        t0 = time.perf_counter()
        engine.evaluate(trees, data)
        sync(engine.device)
        probe = time.perf_counter() - t0
        if probe >= 0.05 or n == P or probe * P / n * 2 <= budget:
            break
        n = min(P, n * 4)
    full_estimate = probe * P / n
    if full_estimate * 2 <= budget or n == P:
        trees, sizes = engine.trees(shared, perm)
        seconds, cpu = timed(engine, trees, data, repeats, budget)
        mean_size = float(sizes.mean())
        row = {"seconds": seconds, "mean_size": mean_size, "gpops": P * mean_size * D / seconds,
               "extrapolated": False}
        if cpu:
            row["gpops_per_cpu_second"] = P * mean_size * D / cpu
        return row
    # subsets: the largest power-of-two multiple of the probe whose timing (warm-up + 2 calls) fits a third
    # of the budget, and half of it; linear cost per node-row between the two allows extrapolation
    per_tree = probe / n
    if per_tree * 2 * 3 > budget:  # even 1 and 2 trees (warm-up + 2 calls each) would pass the budget
        return {"skipped": f"one tree over {D} rows takes ~{per_tree:.3g} s: "
                           f"too slow for the {budget} s budget"}
    n1 = 2
    while n1 * 2 <= P and per_tree * n1 * 2 * 3 <= budget / 3:
        n1 *= 2
    rates = []
    for m in (n1 // 2, n1):
        trees, sizes = engine.trees(shared, perm[:m])
        s, cpu = timed(engine, trees, data, 2, budget / 3)
        rates.append((m, float(sizes.sum()) * D / s, float(sizes.mean()),
                      cpu and float(sizes.sum()) * D / cpu))
    (m0, r0, _, _), (m1, r1, size1, cpu_rate) = rates
    if not 0.7 <= r1 / r0 <= 1.45:
        return {"skipped": f"subset timings are not linear (GPops/s {r0:.3g} at {m0} trees, "
                           f"{r1:.3g} at {m1}); the whole population would take ~{full_estimate:.0f} s"}
    seconds = P * size1 * D / r1
    row = {"seconds": seconds, "mean_size": size1, "gpops": r1, "extrapolated": True, "measured_trees": m1}
    if cpu_rate:
        row["gpops_per_cpu_second"] = cpu_rate
    return row


def run_grid(engines: list, args, log) -> list[dict]:
    results = []
    gen = torch.Generator().manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    for P in args.pop:
        shared = Population.random(P, N_IN, max_len=256, functions=FUNCTIONS, min_depth=3, max_depth=8,
                                   seed=gen)
        perm = rng.permutation(P)
        for D in args.rows:
            X = rng.uniform(-1.0, 1.0, (D, N_IN)).astype(np.float32)
            y = rng.uniform(0.0, 1.0, D).astype(np.float32)
            best: dict[str, dict] = {}
            for _ in range(args.rounds):  # engines alternate within a round: shared-machine noise hits all
                for eng in engines:
                    row = {"engine": eng.name, "device": eng.device, "threads": eng.threads, "P": P, "D": D}
                    if args.max_pop is not None and P > args.max_pop and eng.name != "gprl":
                        row["skipped"] = f"P over --max-pop {args.max_pop}"
                    else:
                        try:
                            row.update(measure_cell(eng, shared, perm, X, y, args.repeats, args.budget))
                        except (MemoryError, RuntimeError) as e:  # e.g. out of memory at the largest cells
                            row["skipped"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                    prev = best.get(eng.name)
                    if prev is None or row.get("gpops", -1) > prev.get("gpops", -1):
                        best[eng.name] = row
            for eng in engines:
                row = best[eng.name]
                row["rounds"] = args.rounds
                if "gpops" in row:
                    row["seconds"] = float(f"{row['seconds']:.6g}")
                    row["gpops"] = float(f"{row['gpops']:.4g}")
                    if "gpops_per_cpu_second" in row:
                        row["gpops_per_cpu_second"] = float(f"{row['gpops_per_cpu_second']:.4g}")
                    row["mean_size"] = round(row["mean_size"], 2)
                log(f"grid {eng.name}/{eng.device} P={P} D={D}: " +
                    (f"{row['gpops']:.3g} GPops/s{' (extrapolated)' if row.get('extrapolated') else ''}"
                     if "gpops" in row else f"skipped: {row['skipped']}"))
                results.append(row)
        del shared
    return results


def cpu_vs_pyoperon(grid: list[dict]) -> dict:
    """gprl's CPU backend against pyoperon, cell by cell, where both ran with the same number of threads."""
    gprl_cpu = {(r["P"], r["D"], r["threads"]): r for r in grid
                if r["engine"] == "gprl" and r["device"] == "cpu" and "gpops" in r}
    cells = []
    for r in grid:
        if r["engine"] != "pyoperon" or "gpops" not in r:
            continue
        g = gprl_cpu.get((r["P"], r["D"], r["threads"]))
        if g is None:
            continue
        cell = {"P": r["P"], "D": r["D"], "threads": r["threads"], "gprl_cpu_gpops": g["gpops"],
                "pyoperon_gpops": r["gpops"], "ratio": round(g["gpops"] / r["gpops"], 3),
                "extrapolated": bool(g.get("extrapolated") or r.get("extrapolated"))}
        if "gpops_per_cpu_second" in g and "gpops_per_cpu_second" in r:
            cell["ratio_per_cpu_second"] = round(g["gpops_per_cpu_second"] / r["gpops_per_cpu_second"], 3)
        cells.append(cell)
    out = {"description": "GPops/s of gprl's CPU backend / pyoperon's, same cores (torch threads = "
                          "pyoperon's thread count); target: ratio >= 1. ratio_per_cpu_second compares GPops "
                          "per CPU-second of each process (robust to other jobs on the machine)",
           "cells": cells}
    for key in ("ratio", "ratio_per_cpu_second"):
        vals = [c[key] for c in cells if key in c]
        if vals:
            out[f"geomean_{key}"] = round(math.exp(statistics.fmean(math.log(v) for v in vals)), 3)
    if cells:
        out["at_least_equal"] = all(c["ratio"] >= 1 for c in cells)
    return out


# ---------------------------------------------------------------- full runs
def run_data(name: str, feynman_rows: int, seed: int):
    if name == "pagie_1":
        d = gprl.datasets.load("pagie_1", seed=seed)
    else:
        d = gprl.datasets.load(name, n_samples=round(feynman_rows / 0.8), test_size=0.2, seed=seed)
    cast = (lambda a: np.ascontiguousarray(a, dtype=np.float32))
    return cast(d.X_train), cast(d.y_train), cast(d.X_test), cast(d.y_test)


def _mse(pred, y) -> float:
    with np.errstate(all="ignore"):
        pred = np.broadcast_to(np.asarray(pred, dtype=np.float64), y.shape)
        v = float(np.mean((pred - y.astype(np.float64)) ** 2))
    return v if math.isfinite(v) else float("inf")


def run_gprl(data, a, device: str) -> dict:
    Xtr, ytr, Xte, yte = data
    gp = GeneticProgramming(Xtr.shape[1], pop_size=a.run_pop, max_len=64, functions=a.run_functions,
                            init_depth=(2, 6), max_depth=17, tournament_size=7, elitism=1, seed=a.seed,
                            device=device)
    objective = RegressionObjective(Xtr, ytr, device=device)
    sync(device)
    start = time.perf_counter()
    pop, sizes, g = gp.init(), [], 0
    while g < a.generations:
        loss = objective(pop)
        sizes.append(pop.lengths().float().mean())  # on the device: no host sync per generation
        g += 1
        if g < a.generations:
            pop = gp.step(pop, loss)
        else:
            gp.archive.update(pop, loss)
        if a.run_time_limit and time.perf_counter() - start > a.run_time_limit:
            gp.archive.update(pop, loss)
            break
    sync(device)
    seconds = time.perf_counter() - start
    _, best = gp.archive.best()
    pred = lambda X: best.forward(torch.from_numpy(X).to(device))[0, :, 0].cpu().numpy()
    return {"seconds": seconds, "generations": g, "mean_size": float(torch.stack(sizes).mean()),
            "train_mse": _mse(pred(Xtr), ytr), "test_mse": _mse(pred(Xte), yte),
            "best_size": int(best.lengths()[0])}


def run_pyoperon(data, a) -> dict:
    import pyoperon as op

    Xtr, ytr, Xte, yte = data
    n_in = Xtr.shape[1]
    values = np.asfortranarray(np.column_stack([Xtr, ytr]).astype(np.float32))
    ds = op.Dataset(values)  # references `values` (float32, Fortran order): it must outlive the run
    variables = sorted(ds.Variables, key=lambda v: v.Index)
    problem = op.Problem(ds)
    problem.TrainingRange = op.Range(0, ds.Rows)
    problem.TestRange = op.Range(ds.Rows - 1, ds.Rows)
    problem.Target = variables[-1]
    problem.InputHashes = [v.Hash for v in variables[:n_in]]
    inputs = problem.InputHashes
    names = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "sin": "Sin", "cos": "Cos", "tan": "Tan",
             "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "tanh": "Tanh", "abs": "Abs"}
    cfg = int(op.NodeType.Constant) | int(op.NodeType.Variable)
    for f in a.run_functions:
        cfg |= int(getattr(op.NodeType, names[f]))
    problem.ConfigurePrimitiveSet(cfg)
    pset = problem.PrimitiveSet
    creator = op.BalancedTreeCreator(pset, inputs, 0.0)
    coeff = op.NormalCoefficientInitializer()
    coeff.ParameterizeDistribution(0.0, 1.0)
    dtable = op.DispatchTable()
    evaluator = op.Evaluator(problem, dtable, op.MSE(), False)  # plain MSE: no linear scaling
    evaluator.Budget = 1 << 62
    comp = op.SingleObjectiveComparison(0)
    female, male = op.TournamentSelector(comp), op.TournamentSelector(comp)
    female.TournamentSize = male.TournamentSize = 7
    reinserter = op.ReplaceWorstReinserter(comp)  # pool = population: generational
    cx = op.SubtreeCrossover(0.9, 17, 64)
    mut = op.MultiMutation()
    onepoint = op.NormalOnePointMutation()
    onepoint.ParameterizeDistribution(0.0, 1.0)
    muts = [onepoint, op.ChangeVariableMutation(inputs), op.ChangeFunctionMutation(pset),
            op.ReplaceSubtreeMutation(creator, coeff, 17, 64),
            op.InsertSubtreeMutation(creator, coeff, 17, 64), op.RemoveSubtreeMutation(pset)]
    for m in muts:
        mut.Add(m, 1.0)
    optimizer = op.LMOptimizer(dtable, problem, 0, 128)
    coeff_opt = op.CoefficientOptimizer(optimizer)
    generator = op.BasicOffspringGenerator(evaluator, cx, mut, female, male, coeff_opt)
    init = op.UniformLengthTreeInitializer(creator)
    init.ParameterizeDistribution(2, 30)  # mean initial length ~16, close to ramped half-and-half 2..6
    init.MinDepth, init.MaxDepth = 1, 1000
    limit = int(a.run_time_limit) if a.run_time_limit else (1 << 62)
    config = op.GeneticAlgorithmConfig(generations=a.generations - 1, max_evaluations=1 << 62,
                                       local_iterations=0, population_size=a.run_pop, pool_size=a.run_pop,
                                       p_crossover=0.8, p_mutation=0.2, p_local=0.0, p_lamarck=0.0,
                                       epsilon=1e-5, seed=a.seed, max_time=limit)
    gp = op.GeneticProgrammingAlgorithm(config, problem, init, coeff, generator, reinserter)
    sizes, overhead = [], [0.0]

    def callback():  # one mean length per generation; its own time is taken off the wall time
        t = time.perf_counter()
        sizes.append(statistics.fmean(ind.Genotype.Length for ind in gp.Individuals))
        overhead[0] += time.perf_counter() - t

    rng = op.RandomGenerator(a.seed)
    start = time.perf_counter()
    gp.Run(rng, callback, a.threads)
    seconds = time.perf_counter() - start - overhead[0]
    best = gp.BestModel.Genotype

    def pred(X):
        v = np.asfortranarray(X.astype(np.float32))
        d = op.Dataset(v)
        return op.Evaluate(dtable, best, d, op.Range(0, d.Rows)).copy()

    return {"seconds": seconds, "generations": len(sizes), "mean_size": statistics.fmean(sizes),
            "train_mse": _mse(pred(Xtr), ytr), "test_mse": _mse(pred(Xte), yte), "best_size": best.Length,
            "note": "pyoperon GeneticProgrammingAlgorithm (BasicOffspringGenerator, replace-worst, pool = "
                    "population), MSE without linear scaling, no local search"}


def run_gplearn(data, a) -> dict:
    from gplearn.genetic import SymbolicRegressor

    Xtr, ytr, Xte, yte = data
    est = SymbolicRegressor(population_size=a.run_pop, generations=1, tournament_size=7,
                            function_set=tuple(a.run_functions), metric="mse", init_depth=(2, 6),
                            const_range=(-1.0, 1.0), parsimony_coefficient=0.001, p_crossover=0.8,
                            p_subtree_mutation=0.1, p_hoist_mutation=0.05, p_point_mutation=0.05,
                            n_jobs=a.threads, random_state=a.seed, warm_start=True)
    start = time.perf_counter()
    g = 0
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        while g < a.generations:  # one generation per warm-started fit, so a time limit can stop it
            g += 1
            est.set_params(generations=g)
            est.fit(Xtr.astype(np.float64), ytr.astype(np.float64))
            if a.run_time_limit and time.perf_counter() - start > a.run_time_limit:
                break
    seconds = time.perf_counter() - start
    lengths = est.run_details_["average_length"]
    fitness = np.array([p.raw_fitness_ for p in est._programs[-1]])
    best = est._programs[-1][int(np.nanargmin(np.where(np.isfinite(fitness), fitness, np.inf)))]
    with np.errstate(all="ignore"):
        return {"seconds": seconds, "generations": g, "mean_size": float(np.mean(lengths)),
                "train_mse": _mse(best.execute(Xtr.astype(np.float64)), ytr),
                "test_mse": _mse(best.execute(Xte.astype(np.float64)), yte), "best_size": len(best.program),
                "note": f"gplearn SymbolicRegressor, parsimony 0.001 (its default; it has no depth/length "
                        f"limit), n_jobs={a.threads}, float64; best = lowest MSE of the last generation"}


def run_deap(data, a) -> dict:
    import operator
    from functools import partial

    from deap import algorithms, base, creator, gp, tools

    Xtr, ytr, Xte, yte = data
    random.seed(a.seed)
    np.random.seed(a.seed)
    pset = deap_pset(f"RUN{os.getpid()}", Xtr.shape[1], a.run_functions)
    pset.addEphemeralConstant(f"c_{os.getpid()}_{time.monotonic_ns()}", partial(random.uniform, -1.0, 1.0))
    if not hasattr(creator, "BenchFitnessMin"):
        creator.create("BenchFitnessMin", base.Fitness, weights=(-1.0,))
        creator.create("BenchIndividual", gp.PrimitiveTree, fitness=creator.BenchFitnessMin)
    tb = base.Toolbox()
    tb.register("expr", gp.genHalfAndHalf, pset=pset, min_=2, max_=6)
    tb.register("individual", tools.initIterate, creator.BenchIndividual, tb.expr)
    tb.register("population", tools.initRepeat, list, tb.individual)
    tb.register("select", tools.selTournament, tournsize=7)
    tb.register("mate", gp.cxOnePoint)
    tb.register("expr_mut", gp.genFull, min_=0, max_=2)
    tb.register("mutate", gp.mutUniform, expr=tb.expr_mut, pset=pset)
    for op_name in ("mate", "mutate"):
        tb.decorate(op_name, gp.staticLimit(key=operator.attrgetter("height"), max_value=17))
        tb.decorate(op_name, gp.staticLimit(key=len, max_value=64))
    cols = [np.ascontiguousarray(Xtr[:, k]) for k in range(Xtr.shape[1])]

    def predict(ind, columns):
        with np.errstate(all="ignore"):
            return gp.compile(ind, pset)(*columns)

    def evaluate(ind):
        return (_mse(predict(ind, cols), ytr),)

    start = time.perf_counter()
    pop = tb.population(n=a.run_pop)
    hof = tools.HallOfFame(1)
    sizes, g = [], 0
    while g < a.generations:
        for ind in pop:  # every tree every generation, as the other engines do
            ind.fitness.values = evaluate(ind)
        hof.update(pop)
        sizes.append(statistics.fmean(len(ind) for ind in pop))
        g += 1
        if g == a.generations or (a.run_time_limit and time.perf_counter() - start > a.run_time_limit):
            break
        offspring = algorithms.varAnd(tb.select(pop, len(pop) - 1), tb, cxpb=0.8, mutpb=0.2)
        pop = [tb.clone(hof[0])] + offspring  # elitism 1, like the others
    seconds = time.perf_counter() - start
    best = hof[0]
    return {"seconds": seconds, "generations": g, "mean_size": statistics.fmean(sizes),
            "train_mse": _mse(predict(best, cols), ytr),
            "test_mse": _mse(predict(best, [np.ascontiguousarray(Xte[:, k]) for k in range(Xte.shape[1])]),
                             yte),
            "best_size": len(best),
            "note": "DEAP eaSimple-style loop (selTournament 7, cxOnePoint, mutUniform, height <= 17, length "
                    "<= 64, elitism 1), NumPy float32, every tree evaluated every generation"}


RUNNERS = {"pyoperon": run_pyoperon, "gplearn": run_gplearn, "deap": run_deap}


def run_full(engines: list[str], args, log) -> list[dict]:
    results = []
    for name in args.run_datasets:
        data = run_data(name, args.feynman_rows, args.seed)
        D = data[0].shape[0]
        for eng in engines:
            device = args.device if eng == "gprl" else "cpu"
            row = {"engine": eng, "device": device, "threads": 1 if eng == "deap" else args.threads,
                   "dataset": name, "train_rows": D, "test_rows": data[2].shape[0],
                   "population": args.run_pop}
            if eng == "tensorgp":
                row["skipped"] = ("TensorGP's engine evolves images (it clips outputs to a codomain, saves "
                                  "state, has no SR loop); only its evaluation is compared, in the grid")
                results.append(row)
                continue
            try:
                res = run_gprl(data, args, device) if eng == "gprl" else RUNNERS[eng](data, args)
            except Exception as e:  # noqa: BLE001  one failing peer must not lose the others' results
                row["skipped"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                results.append(row)
                log(f"run {eng} {name}: failed: {row['skipped']}")
                continue
            row.update(res)
            row["gpops"] = float(
                f"{row['generations'] * args.run_pop * row['mean_size'] * D / row['seconds']:.4g}")
            for k in ("seconds", "mean_size", "train_mse", "test_mse"):
                row[k] = float(f"{row[k]:.5g}")
            log(f"run {eng}/{device} {name}: {row['seconds']:.1f} s, {row['generations']} generations, "
                f"mean size {row['mean_size']:.1f}, {row['gpops']:.3g} GPops/s, "
                f"train MSE {row['train_mse']:.4g}, test MSE {row['test_mse']:.4g}")
            results.append(row)
    return results


# ---------------------------------------------------------------- merge and plot
def merge(doc: dict, files: list[str]) -> None:
    """Adds other runs' grid and run rows (e.g. CPU peers beside a GPU gprl run), keyed by their source."""
    have_grid = {(r["engine"], r["device"], r["P"], r["D"]) for r in doc["grid"]["results"]}
    have_runs = {(r["engine"], r["device"], r["dataset"]) for r in doc["runs"]["results"]}
    for f in files:
        other = json.loads(Path(f).read_text())
        if other.get("benchmark") != "compare":
            raise SystemExit(f"{f} is not a bench_compare.py document")
        src = {"file": str(f), "machine": other.get("machine"), "versions": other.get("versions")}
        doc.setdefault("merged_from", []).append(src)
        for r in other.get("grid", {}).get("results", []):
            key = (r["engine"], r["device"], r["P"], r["D"])
            if key not in have_grid:
                doc["grid"]["results"].append({**r, "source": str(f)})
                have_grid.add(key)
        for r in other.get("runs", {}).get("results", []):
            key = (r["engine"], r["device"], r["dataset"])
            if key not in have_runs:
                doc["runs"]["results"].append({**r, "source": str(f)})
                have_runs.add(key)
        for k, v in (other.get("versions") or {}).items():
            doc["versions"].setdefault(k, v)


def _plot_grid(ax, grid: list[dict], plt) -> None:
    keys = sorted({(r["engine"], r["device"]) for r in grid})
    colors = {k: plt.cm.tab10(i % 10) for i, k in enumerate(keys)}
    pops = sorted({r["P"] for r in grid})
    markers = dict(zip(pops, "os^Dvp*"))
    for k in keys:
        for P in pops:
            rows = sorted((r for r in grid if (r["engine"], r["device"]) == k and r["P"] == P),
                          key=lambda r: r["D"])
            if not rows:
                continue
            ax.plot([r["D"] for r in rows], [r["gpops"] for r in rows], color=colors[k], marker=markers[P],
                    alpha=0.85, label=f"{k[0]} ({k[1]}) P={P:,}")
            ext = [r for r in rows if r.get("extrapolated")]
            if ext:  # extrapolated cells: hollow markers
                ax.plot([r["D"] for r in ext], [r["gpops"] for r in ext], linestyle="none", marker=markers[P],
                        markersize=10, markerfacecolor="white", markeredgecolor=colors[k])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("data points D")
    ax.set_ylabel("GPops/s = P * mean size * D / s")
    ax.set_title("SR-fitness throughput (hollow: extrapolated from subsets)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)


def _plot_runs(ax, runs: list[dict], plt) -> None:
    datasets = sorted({r["dataset"] for r in runs})
    keys = sorted({(r["engine"], r["device"]) for r in runs})
    width = 0.8 / max(1, len(keys))
    for j, k in enumerate(keys):
        for i, d in enumerate(datasets):
            r = next((r for r in runs if (r["engine"], r["device"]) == k and r["dataset"] == d), None)
            if r is None:
                continue
            x = i + (j - (len(keys) - 1) / 2) * width
            ax.bar(x, r["gpops"], width, color=plt.cm.tab10(j % 10),
                   label=f"{k[0]} ({k[1]})" if i == 0 else None)
            ax.text(x, r["gpops"], f"{r['seconds']:.0f} s\n{r['generations']} g\n{r['train_mse']:.2g}",
                    ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(datasets)))
    ax.set_xticklabels([f"{d}\n(D={next(r['train_rows'] for r in runs if r['dataset'] == d):,}, "
                        f"P={next(r['population'] for r in runs if r['dataset'] == d):,})" for d in datasets])
    ax.set_yscale("log")
    ax.set_ylabel("GPops/s = G * P * mean size * D / wall s")
    ax.set_title("full runs (labels: wall time, generations, train MSE)")
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", which="both", alpha=0.3)


def plot(doc: dict, path: str) -> None:
    """GPops/s vs D per engine x P (log-log), and a bar chart of the full runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = [r for r in doc["grid"]["results"] if "gpops" in r]
    runs = [r for r in doc["runs"]["results"] if "gpops" in r]
    panels = [(f, rows) for f, rows in ((_plot_grid, grid), (_plot_runs, runs)) if rows]
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5 * len(panels) + 1, 6.5), squeeze=False)
    for ax, (f, rows) in zip(axes[0], panels):
        f(ax, rows, plt)
    m = doc["machine"]
    fig.suptitle(f"CPU: {m['cpu']}, {m['threads']} threads" + (f"; GPU: {m['gpu']}" if m.get("gpu") else "")
                 + "".join(f"; merged: {s['file']}" for s in doc.get("merged_from", [])), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- main
def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES,
                    help="engines to run; peers that are not installed are skipped with a note")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="gprl's (and TensorGP's) device; the other peers run on the CPU")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="CPU threads: torch.set_num_threads, pyoperon's threads, gplearn's n_jobs")
    ap.add_argument("--pop", type=int, nargs="+", default=[100, 1000, 10_000, 100_000, 1_000_000])
    ap.add_argument("--rows", type=int, nargs="+", default=[60, 392, 20_640, 100_000])
    ap.add_argument("--budget", type=float, default=10.0,
                    help="seconds per grid cell and engine; longer cells are extrapolated from subsets")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per cell (median), within the budget")
    ap.add_argument("--rounds", type=int, default=1,
                    help="measure every cell this many times, engines alternating; keep each engine's best")
    ap.add_argument("--max-pop", type=int, default=None,
                    help="engines other than gprl on --device skip cells with P above this (default: none)")
    ap.add_argument("--no-grid", action="store_true", help="skip the evaluation grid")
    ap.add_argument("--no-runs", action="store_true", help="skip the full runs")
    ap.add_argument("--run-engines", nargs="+", default=None, choices=ENGINES,
                    help="engines for the full runs (default: --engines)")
    ap.add_argument("--generations", type=int, default=100)
    ap.add_argument("--run-pop", type=int, default=1000)
    ap.add_argument("--run-datasets", nargs="+", default=["pagie_1", "feynman_I_9_18"])
    ap.add_argument("--feynman-rows", type=int, default=100_000, help="training rows of Feynman I.9.18")
    ap.add_argument("--run-functions", nargs="+", default=list(FUNCTIONS))
    ap.add_argument("--run-time-limit", type=float, default=None,
                    help="stop a run after the generation that passes this many seconds")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--merge", nargs="+", default=[], metavar="FILE.json",
                    help="add the results of other bench_compare.py documents (e.g. CPU peers to a GPU run)")
    ap.add_argument("--out", default=None, help="write the JSON here (default: stdout)")
    ap.add_argument("--plot", default=None, help="write a PNG plot here")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda but CUDA is not available")
    if args.threads != torch.get_num_threads():
        # only when it changes: an explicit set_num_threads (even to the default) can make small elementwise
        # torch ops (TensorGP's, gprl's variation step) far slower on a busy machine
        torch.set_num_threads(args.threads)

    log = progress_log(args.quiet)
    engines, skipped = available(args.engines, peer_available, log)
    doc = {
        "benchmark": "compare",
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(args.threads, args.device),
        "versions": {"torch": torch.__version__, "numpy": np.__version__,
                     **{n: engine_version(n) for n in ENGINES if n not in skipped}},
        "skipped_engines": skipped,
        "settings": {k: v for k, v in vars(args).items() if k not in ("quiet",)},
        "grid": {"functions": FUNCTIONS, "n_in": N_IN, "init": "ramped half-and-half, depths 3..8",
                 "measure": "GPops/s = P * mean_size * D / seconds", "results": []},
        "runs": {"settings": {"generations": args.generations, "population": args.run_pop,
                              "functions": args.run_functions, "selection": "tournament, size 7",
                              "init": "ramped half-and-half depths 2..6 (pyoperon: its BTC, lengths 2..30)",
                              "variation": "crossover 0.8, mutation 0.2", "limits": "depth 17, length 64",
                              "measure": "GPops/s = G * P * mean_size * D / wall seconds"},
                 "results": []},
    }
    if not args.no_grid:
        active = []
        for name in engines:
            eng = ENGINE_CLASSES[name](args.device if name in ("gprl", "tensorgp") else "cpu", args.threads)
            active.append(eng)
        doc["grid"]["results"] = run_grid(active, args, log)
    if not args.no_runs:
        run_engines = [e for e in (args.run_engines or engines) if e in engines]
        doc["runs"]["results"] = run_full(run_engines, args, log)
    # other jobs on a shared machine take cores from the timed ones: the load says how much to trust figures
    doc["machine"]["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
    merge(doc, args.merge)
    doc["cpu_vs_pyoperon"] = cpu_vs_pyoperon(doc["grid"]["results"])
    text = json.dumps(doc, indent=1)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    if args.plot:
        plot(doc, args.plot)
    return doc


if __name__ == "__main__":
    main()
