"""Evaluation strategies, Python side (no GPU needed): names and overrides, the cost model's interpolation
and argmin on an injected timing function, the calibration cache and the fallback when calibration fails."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gprl
import gprl.backend.ops
from gprl import Population, strategy
from gprl.backend.strategy import IDS, PROBE_D, PROBE_P, CostModel, calibrate, names

CUDA0 = torch.device("cuda", 0)  # a device object only: nothing here touches a GPU
KERNEL_CACHE = os.environ.get("GPRL_CACHE")  # before the fixture points GPRL_CACHE at a temporary folder

# A power law per strategy, t = c * P^a * D^b: log-log bilinear interpolation reproduces it exactly, so the
# model's predictions and argmin can be checked anywhere inside the probe grid. Winners vary over the grid.
LAWS = {"warp": (4e-8, 0.8, 0.9), "hybrid_r1": (3e-7, 0.6, 0.7), "hybrid_r2": (2e-7, 0.62, 0.72),
        "hybrid_r4": (6e-7, 0.55, 0.6), "level": (1e-6, 0.4, 0.5)}


# and a cost per output quadrupling: t(n outputs) = t(1) * OUT[s] ** log_4(n) (warp: single output only)
OUT = {"hybrid_r1": 1.2, "hybrid_r2": 1.3, "hybrid_r4": 1.9, "level": 1.1}


def law(s, P, D, n_out=1):
    assert n_out == 1 or s != "warp", "warp was timed with several outputs"
    c, a, b = LAWS[s]
    return c * P**a * D**b * (OUT[s] ** math.log(n_out, 4) if n_out > 1 else 1.0)


def fake_time_fn(op, s, P, D, n_out, limit):
    return law(s, P, D, n_out)


def true_best(op, P, D, n_out=1):
    usable = [s for s in names(op) if strategy.unavailable(op, s, D, n_out) is None]
    return min(usable, key=lambda s: law(s, P, D, n_out)) if usable else None


@pytest.fixture(autouse=True)
def clean_state(monkeypatch, tmp_path):
    gprl.backend.build.load()  # the kernels stay in the real cache; calibration files go to tmp_path
    monkeypatch.setenv("GPRL_CACHE", str(tmp_path))
    monkeypatch.setattr(strategy, "_device_name", lambda index: f"FakeGPU {index}")
    strategy.reset()
    gprl.set_strategy(None)
    yield
    strategy.reset()
    gprl.set_strategy(None)


def small_problem():
    pop = Population.random(30, 3, max_len=32, seed=0)
    X, y = torch.rand(50, 3), torch.rand(50)
    return pop, gprl.Dataset(X, y), X


# ---- names and overrides ----
def test_strategy_names_are_validated():
    pop, data, X = small_problem()
    cuda = r"\['auto', 'level', 'warp', 'hybrid_r1', 'hybrid_r2', 'hybrid_r4'\] \(CUDA\)"
    with pytest.raises(ValueError, match=cuda + r" or \['interpreter', 'shared'\] \(CPU\)"):
        pop.fitness(data, strategy="fastest")
    with pytest.raises(ValueError, match="'shared' evaluates on the CPU only; on a CUDA device choose one"):
        strategy.choose("fitness", "shared", CUDA0, 30, 50)  # the name's rule: no GPU needed to check it
    with pytest.raises(ValueError, match="'interpreter' evaluates on the CPU only"):
        strategy.choose("forward", "interpreter", CUDA0, 30, 50)
    with pytest.raises(ValueError,
                       match=r"not a strategy of forward; choose one of \['auto', 'level', 'hybrid_r1'"):
        pop.forward(X, strategy="warp")  # warp is fitness's only
    with pytest.raises(ValueError, match="per-tree rows"):
        pop.forward(X[None].expand(30, -1, -1), strategy="hybrid_r2")
    with pytest.raises(ValueError, match="choose one of"):
        gprl.set_strategy("Warp")
    with pytest.raises(ValueError, match="choose one of"):
        gprl.set_strategy("thread")  # id 0 is kept free: no such strategy yet
    with pytest.raises(ValueError, match="not a strategy"):
        pop.fitness(data, strategy=3)
    multi = Population.random(30, 3, 2, max_len=32, seed=0)
    with pytest.raises(ValueError,
                       match=r"single-output.*\['auto', 'level', 'hybrid_r1', 'hybrid_r2', 'hybrid_r4'\]"):
        multi.fitness(X, torch.rand(50, 2), strategy="warp")
    assert gprl.get_strategy() is None


def test_kernels_check_strategy_ids():
    pop, data, X = small_problem()
    args = (*pop.tensors(), data.Xt, data.yt, None, 0, pop.max_stack())
    fwd = (*pop.tensors(), data.Xt, 1, pop.max_stack())
    base, base_fwd = torch.ops.gprl.fitness(*args), torch.ops.gprl.forward(*fwd)
    for sid in (-1, *IDS.values()):  # the CPU takes every id of fitness: its own two, the CUDA ones interpret
        assert torch.equal(torch.ops.gprl.fitness(*args, sid), base)
    for sid in (-1, 2, 3, 4, 5, 6, 7):
        assert torch.equal(torch.ops.gprl.forward(*fwd, sid), base_fwd)
    for bad in (0, 8, -2, 1 << 40):
        with pytest.raises(RuntimeError,
                           match=r"strategy .* valid ids: -1 \(auto\), 1 \(warp\), 2 \(hybrid_r1\)"):
            torch.ops.gprl.fitness(*args, bad)
    for bad in (0, 1, 8, -2):
        with pytest.raises(RuntimeError,
                           match=r"not a strategy of forward; valid ids: -1 \(auto\), 2 \(hybrid_r1\)"):
            torch.ops.gprl.forward(*fwd, bad)
    multi = Population.random(30, 3, 2, max_len=32, seed=0)
    d2 = gprl.Dataset(X, torch.rand(50, 2))
    margs = (*multi.tensors(), d2.Xt, d2.yt, None, 0, multi.max_stack())
    with pytest.raises(RuntimeError, match=r"1 \(warp\) evaluates single-output trees only, got n_out=2"):
        torch.ops.gprl.fitness(*margs, IDS["warp"])
    for sid in (-1, 2, 3, 4, 5):
        assert torch.equal(torch.ops.gprl.fitness(*margs, sid), torch.ops.gprl.fitness(*margs))


class Spy:
    """Records the strategy id every op call receives."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        op = getattr(torch.ops.gprl, name)

        def call(*args):
            self.calls.append((name, args[-1]))
            return op(*args)

        return call


def test_overrides_reach_the_ops(monkeypatch):
    pop, data, X = small_problem()
    multi = Population.random(30, 3, 2, max_len=32, seed=0)
    spy = Spy()
    monkeypatch.setattr(gprl.backend.ops, "ops", spy)  # Population's calls look torch.ops.gprl up here
    Xb = X[None].expand(30, -1, -1)
    pop.fitness(data)
    pop.forward(X)
    pop.forward(Xb)
    # forward_batched takes no strategy: its last argument is max_stack, on the CPU the bound max_len
    assert spy.calls == [("fitness", -1), ("forward", -1), ("forward_batched", pop.kind.shape[1])]
    spy.calls.clear()
    pop.fitness(data, strategy="warp")
    pop.forward(X, strategy="hybrid_r4")
    pop.fitness(data, strategy="hybrid_r2")
    pop.fitness(data, strategy="auto")
    assert spy.calls == [("fitness", 1), ("forward", 4), ("fitness", 3), ("fitness", -1)]
    spy.calls.clear()
    gprl.set_strategy("warp")  # global: applies to the calls that can run it, the others stay automatic
    pop.fitness(data)
    pop.forward(X)
    pop.fitness(data, strategy="hybrid_r1")  # the call's argument wins
    multi.fitness(X, torch.rand(50, 2))  # warp has one output: automatic
    gprl.set_strategy("hybrid_r2")
    pop.forward(X)
    pop.fitness(data)
    gprl.set_strategy("shared")  # the CPU's: both ops, any output count
    multi.fitness(X, torch.rand(50, 2))
    pop.forward(X)
    assert spy.calls == [("fitness", 1), ("forward", -1), ("fitness", 2), ("fitness", -1), ("forward", 3),
                         ("fitness", 3), ("fitness", 6), ("forward", 6)]
    gprl.set_strategy("auto")
    assert gprl.get_strategy() is None


def test_every_strategy_gives_the_same_result_on_cpu():
    pop, data, X = small_problem()
    base = pop.fitness(data)
    for s in names("fitness"):
        assert torch.equal(pop.fitness(data, strategy=s), base)
    for s in names("forward"):
        assert torch.equal(pop.forward(X, strategy=s), pop.forward(X))
    for s in strategy.CPU_STRATEGIES:
        assert torch.equal(pop.fitness(data, strategy=s), base)
        assert torch.equal(pop.forward(X, strategy=s), pop.forward(X))


def run_python(code, **env):
    repo = Path(__file__).resolve().parents[2]
    full = {**os.environ, "PYTHONPATH": str(repo), **env}
    full.pop("GPRL_CACHE")
    if KERNEL_CACHE:  # importing gprl loads the kernels: reuse the compiled ones
        full["GPRL_CACHE"] = KERNEL_CACHE
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, cwd=repo,
                          check=False)


def test_environment_variable_sets_the_global_strategy():
    ok = run_python("import gprl; print(gprl.get_strategy())", GPRL_STRATEGY="hybrid_r2")
    assert ok.returncode == 0 and ok.stdout.strip() == "hybrid_r2", ok.stderr
    bad = run_python("import gprl", GPRL_STRATEGY="fast")
    assert bad.returncode != 0 and "GPRL_STRATEGY='fast' is not a strategy" in bad.stderr


# ---- the cost model ----
def test_model_reproduces_probes_and_picks_the_argmin():
    for op in ("fitness", "forward"):
        m = CostModel({op: calibrate(op, fake_time_fn)})
        gp, gd = strategy.PROBE_P, strategy.PROBE_D
        for P in gp:
            for D in gd:
                if P * D > strategy.MAX_PROBE_WORK:
                    continue
                for s in names(op):
                    assert m.predict(op, s, P, D) == pytest.approx(law(s, P, D), rel=1e-9)
                assert m.best(op, P, D) == true_best(op, P, D)
        # between measured probes a power law is interpolated exactly: the argmin holds off the probes too
        for P in (100, 1000, 3000, 10_000, 50_000):
            for D in (3, 20, 60, 392, 1000, gd[-1] // 2):
                D = min(D, gd[-1])
                upper = [next(g for g in grid if g >= x) for grid, x in ((gp, P), (gd, max(D, gd[0])))]
                if upper[0] * upper[1] <= strategy.MAX_PROBE_WORK and D >= gd[0]:
                    assert m.predict(op, "hybrid_r2", P, D) == pytest.approx(law("hybrid_r2", P, D), rel=1e-9)
                    assert m.best(op, P, D) == true_best(op, P, D)


def test_model_extrapolates_by_work_and_fills_skipped_cells():
    table = calibrate("fitness", fake_time_fn, max_work=1 << 22)
    m = CostModel({"fitness": table})
    pmax, dmax = PROBE_P[-1], PROBE_D[-1]
    assert table["seconds"]["warp"][-1][-1] is None  # skipped: too much work to probe
    # a skipped cell: the largest measured P of its column, scaled by the work
    i = max(k for k, P in enumerate(PROBE_P) if P * dmax <= 1 << 22)
    expect = law("warp", PROBE_P[i], dmax) * pmax / PROBE_P[i]
    assert m.predict("fitness", "warp", pmax, dmax) == pytest.approx(expect, rel=1e-9)
    # beyond the grid: proportional to work; below it: flat
    base = m.predict("fitness", "hybrid_r4", pmax, 512)
    assert m.predict("fitness", "hybrid_r4", 4 * pmax, 512) == pytest.approx(4 * base, rel=1e-9)
    assert m.predict("fitness", "warp", 1, 1) == pytest.approx(law("warp", PROBE_P[0], PROBE_D[0]), rel=1e-9)
    # tree length scales every strategy alike
    assert m.predict("fitness", "warp", 1024, 64, mean_len=54.0) == pytest.approx(
        2 * m.predict("fitness", "warp", 1024, 64), rel=1e-9)


def test_model_prices_outputs_per_strategy():
    m = CostModel({"fitness": calibrate("fitness", fake_time_fn)})
    assert m.tables["fitness"]["output_factor"] == pytest.approx(OUT, rel=1e-9)  # warp: never timed so
    for n_out in (2, 16, 200):
        assert m.predict("fitness", "hybrid_r1", 4096, 64, n_out) == pytest.approx(
            law("hybrid_r1", 4096, 64, n_out), rel=1e-9)
        assert m.predict("fitness", "warp", 4096, 64, n_out) == math.inf
        for P, D in ((300, 30), (4096, 64), (30_000, 2000)):
            assert m.best("fitness", P, D, n_out) == true_best("fitness", P, D, n_out)
    # outputs change the choice somewhere on the grid (the fake laws are built so)
    assert any(m.best("fitness", P, D, 16) != m.best("fitness", P, D) for P in PROBE_P for D in PROBE_D)


def test_shared_memory_bound_of_multi_output_hybrids():
    # 4 rows x 128 threads x 4 bytes: 48 outputs fit in 96 KiB, 49 do not; fewer threads on small datasets
    assert strategy.unavailable("fitness", "hybrid_r4", 100_000, 48) is None
    assert "shared memory" in strategy.unavailable("fitness", "hybrid_r4", 100_000, 49)
    assert strategy.unavailable("fitness", "hybrid_r4", 100, 150) is None  # 32 threads
    # forward keeps no outputs in smem
    assert strategy.unavailable("forward", "hybrid_r4", 100_000, 256) is None
    assert strategy.hybrid_threads(1, 4) == 32 and strategy.hybrid_threads(200, 1) == 128
    assert strategy.hybrid_threads(200, 4) == 64
    m = CostModel({"fitness": calibrate("fitness", fake_time_fn)})
    assert m.predict("fitness", "hybrid_r4", 4096, 100_000, 64) == math.inf
    assert m.best("fitness", 4096, 100_000, 256) == "level"  # the level strategy keeps no outputs per thread
    assert m.best("fitness", 4096, 100_000, 256, max_len=4096) is None  # nothing fits: the kernels' heuristic


def test_level_strategy_takes_max_len_up_to_1024():
    assert strategy.unavailable("fitness", "level", 100_000, 256, max_len=1024) is None
    assert "max_len up to 1024" in strategy.unavailable("forward", "level", 60, 1, max_len=1025)
    with pytest.raises(ValueError, match="max_len up to 1024"):
        strategy.choose("fitness", "level", CUDA0, 100, 60, 1, 4096)
    # CPU: checked name only
    assert strategy.choose("fitness", "level", torch.device("cpu"), 100, 60, 1, 4096) == IDS["level"]


def test_failed_strategy_probe_never_wins():
    def partly_broken(op, s, P, D, n_out, limit):
        return None if s == "warp" else law(s, P, D, n_out)

    m = CostModel({"fitness": calibrate("fitness", partly_broken)})
    assert m.predict("fitness", "warp", 64, 16) == math.inf
    assert m.best("fitness", 64, 16) == min((s for s in names("fitness") if s != "warp"),
                                            key=lambda s: law(s, 64, 16))


def test_calibrated_once_cached_and_memoised(monkeypatch, tmp_path):
    calls = []

    def factory(index):
        calls.append(index)
        return fake_time_fn, 27.0

    monkeypatch.setattr(strategy, "_time_fn_factory", factory)
    assert strategy.auto("fitness", CUDA0, 1024, 512) == true_best("fitness", 1024, 512)
    assert strategy.choose("fitness", None, CUDA0, 16384, 64) == IDS[true_best("fitness", 16384, 64)]
    assert (strategy.choose("fitness", None, CUDA0, 1030, 512)
            == strategy.choose("fitness", None, CUDA0, 1200, 512))
    assert strategy.auto("fitness", CUDA0, 4096, 64, n_out=16) == true_best("fitness", 4096, 64, 16)
    assert strategy.auto("fitness", CUDA0, 4096, 100_000, n_out=256, max_len=4096) is None  # no strategy fits
    assert strategy.choose("fitness", None, CUDA0, 4096, 100_000, 256, 4096) == strategy.AUTO
    assert strategy.choose("forward", None, CUDA0, 1024, 512) == IDS[true_best("forward", 1024, 512)]
    assert calls == [0, 0]  # one calibration per (device, op), then memoised decisions
    files = list((tmp_path / "strategy").glob("*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert (doc["device"] == "FakeGPU 0" and doc["torch"] == torch.__version__
            and doc["kernels"].startswith("gprl_ops_"))
    assert set(doc["tables"]) == {"fitness", "forward"}
    assert set(doc["tables"]["fitness"]["seconds"]) == set(names("fitness"))

    # a new process (reset) reads the file instead of timing again
    strategy.reset()
    monkeypatch.setattr(strategy, "_time_fn_factory", lambda index: pytest.fail("calibrated twice"))
    assert strategy.auto("fitness", CUDA0, 1024, 512) == true_best("fitness", 1024, 512)
    m = strategy.model(CUDA0)
    assert m.predict("fitness", "warp", 1024, 512) == pytest.approx(law("warp", 1024, 512), rel=1e-9)
    # another device is another cache entry; a stale file (other kernels) is ignored
    doc["kernels"] = "gprl_ops_0000000000000000"
    files[0].write_text(json.dumps(doc))
    strategy.reset()
    monkeypatch.setattr(strategy, "_time_fn_factory", factory)
    strategy.auto("fitness", CUDA0, 64, 16)
    assert calls == [0, 0, 0]


def test_calibration_failure_warns_once_and_falls_back(monkeypatch):
    def broken(index):
        raise RuntimeError("no timer")

    monkeypatch.setattr(strategy, "_time_fn_factory", broken)
    with pytest.warns(RuntimeWarning, match="calibrating the fitness strategies on FakeGPU 0 failed"):
        assert strategy.choose("fitness", None, CUDA0, 1000, 60) == strategy.AUTO
    assert strategy.auto("fitness", CUDA0, 100_000, 60) is None  # the kernels' heuristic; no second warning
    # a forced strategy still works without a model; one the call cannot run is an error, not a crash
    assert strategy.choose("fitness", "hybrid_r1", CUDA0, 1000, 60) == IDS["hybrid_r1"]
    with pytest.raises(ValueError, match="shared memory"):
        strategy.choose("fitness", "hybrid_r4", CUDA0, 1000, 100_000, 64)
    with pytest.raises(ValueError, match="single-output"):
        strategy.choose("fitness", "warp", CUDA0, 1000, 60, 2)


def test_probe_workloads_run_every_strategy(monkeypatch):
    # the calibration's workloads, on the CPU and shrunk: every (op, strategy, n_out) call runs and has the
    # right shape; a wall-clock timer gives a complete table
    monkeypatch.setattr(strategy, "PROBE_P", (4, 16))
    monkeypatch.setattr(strategy, "PROBE_D", (3, 40))
    monkeypatch.setattr(strategy, "OUTPUT_CELLS", ((16, 5),))
    probes = strategy._Probes(torch.device("cpu"))
    assert 5 < probes.mean_len < 60

    def wall(op, s, P, D, n_out, limit):
        out = probes.call(op, s, P, D, n_out)()
        assert out.shape == ((P,) if op == "fitness" else (P, D, n_out))
        return 1e-6 * (1 + names(op).index(s))

    for op in strategy.OP_STRATEGIES:
        table = calibrate(op, wall, probes.mean_len)
        m = CostModel({op: table})
        assert m.best(op, 10, 10) == names(op)[0]
        assert set(table["output_factor"]) == set(names(op)) - {"warp"}


def test_unwritable_cache_keeps_the_calibration(monkeypatch):
    def refuse(*args):
        raise OSError("read-only file system")

    monkeypatch.setattr(strategy, "_time_fn_factory", lambda index: (fake_time_fn, 27.0))
    monkeypatch.setattr(strategy, "save_tables", refuse)
    with pytest.warns(RuntimeWarning, match="could not cache"):
        assert strategy.auto("fitness", CUDA0, 1024, 512) == true_best("fitness", 1024, 512)
