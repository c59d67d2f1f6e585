"""gprl against the other symbolic-regression engines on ground-truth problems, SRBench's protocol, at the
same wall-clock budget per problem; one JSON document and one PNG.

Problems: the 40 Feynman equations of ``gprl.feynman`` and the Nguyen (12) and Keijzer (15) benchmarks of
``gprl.datasets``. Each problem gets --rows rows from ``gprl.datasets.sample`` (every variable uniform in its
interval of ``gprl.datasets.ranges``: the Feynman database's ranges, the synthetic sets' training ranges),
split 75/25 into train/test with a seed fixed per problem (from its name and --seed). Target noise follows
SRBench's ground-truth experiments: Gaussian noise of sd = level x RMS(y_train) is added to the training
targets only; test scores are against the noise-free targets. (SRBench draws 100,000 rows, splits 75/25 and
subsamples 10,000 training rows; here the whole set has --rows rows.)

Engines, all given the same function set (--functions, default {+, -, *, /, sin, cos, exp, log, sqrt}) and
the same wall-clock budget (--time seconds per fit; generation/evaluation caps are lifted so the time limit
ends every run), random_state = the problem's seed, all other settings their defaults:
  gprl      gprl.SymbolicRegressor(time_limit=T, device=--device); log = log|a|, sqrt = sqrt|a| (protected)
  pyoperon  pyoperon.sklearn.SymbolicRegressor(max_time=max(1, floor(T)), n_threads=--threads); log and sqrt
            as its logabs and sqrtabs (gprl's semantics)
  gplearn   gplearn.genetic.SymbolicRegressor(n_jobs=--threads, warm_start=True): one generation per fit call,
            until the one that passes T (gprl's time_limit stops the same way); exp is a make_function (its
            set has none), log and sqrt are its protected ones (log|a|, sqrt|a|)
  pysr      pysr.PySRRegressor(timeout_in_seconds=T, procs=--threads), only if installed (its log/sqrt are
            undefined for negative arguments)
Each engine runs once, untimed, on a tiny problem first (kernel compilation, worker start-up, JIT).

Per (engine, problem, noise) the JSON holds: test R^2 (of the engine's own predict), "accuracy_solution"
(test R^2 > 0.999), "symbolic_solution" (SRBench's definition: the model minus the true formula simplifies
to a constant, or model / truth simplifies to a nonzero constant), the model (sympy, over x0, x1, ... in
feature order; "feature_names" maps them), "model_length" (nodes of the simplified model in sympy's
preorder traversal, SRBench's complexity, counted the same way for every engine), the wall-clock fit
seconds, and the generations run. Before the comparison every float constant of the model is rounded to 6
significant digits and one within 1e-6 (relative) of a fraction p/q with q <= 10 becomes that fraction (so
x**2.0 meets x**2), and variables sampled from non-negative intervals are positive symbols (so sqrt|a| of a
positive term is sqrt(a)). As in SRBench, models with test R^2 <= 0.5 are not checked (not a symbolic
solution). sympy runs in a forked child killed after --sympy-timeout seconds (then: not a symbolic
solution, "sympy": "timeout ...").

--out is rewritten after every entry, so a run cut off loses nothing; --resume keeps the entries already in
--out and runs only the missing (engine, device, problem, noise, time) ones. The summary per engine, device,
noise and time: accuracy- and symbolic-solution rates, median model length, median fit seconds.

    python scripts/bench_srbench.py --out srbench_cpu.json --plot srbench_cpu.png
    python scripts/bench_srbench.py --noise 0.01 --every 2 --out srbench_cpu.json --resume
    python scripts/bench_srbench.py --engines gprl --device cuda --out gpu.json   # then, to compare:
    python scripts/bench_srbench.py --merge gpu.json srbench_cpu.json --plot srbench.png
    python scripts/bench_srbench.py --engines gprl pyoperon --problems nguyen_1 feynman_I.9.18 --time 3
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
import warnings
import zlib
from fractions import Fraction
from pathlib import Path

import numpy as np
import sympy
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's gprl
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_compare's machine helpers

from bench_compare import available, engine_version, machine, progress_log

import gprl
from gprl.core.seeds import mix_seed
from gprl.sr import datasets, feynman

ENGINES = ("gprl", "pyoperon", "gplearn", "pysr")
PIP = {"pyoperon": "pyoperon", "gplearn": "gplearn", "pysr": "pysr"}
FUNCTIONS = ("add", "sub", "mul", "div", "sin", "cos", "exp", "log", "sqrt")
SUPPORTED = ("add", "sub", "mul", "div", "sin", "cos", "tan", "exp", "log", "sqrt")
FAMILIES = ("feynman", "nguyen", "keijzer")
ACCURACY_R2 = 0.999  # SRBench's accuracy solution: test R^2 above this
CHECK_R2 = 0.5  # SRBench checks symbolic equivalence only for models with test R^2 above this
GENERATIONS = 10**9  # generation caps lifted: the time limit ends every run


# ---------------------------------------------------------------- problems and data
def problem_names() -> list[str]:
    """Feynman (database order), then Nguyen 1..12, then Keijzer 1..15."""
    syn = [n for n in datasets.SYNTHETIC if n.startswith(("nguyen_", "keijzer_"))]
    syn.sort(key=lambda n: (n.split("_")[0] != "nguyen", int(n.split("_")[1])))
    return [e.key for e in feynman.EQUATIONS] + syn


def select_problems(requested: list[str], every: int) -> list[str]:
    """Names or families (feynman, nguyen, keijzer, all), in benchmark order, then every ``every``-th."""
    known = problem_names()
    chosen: set[str] = set()
    for r in requested:
        if r == "all":
            chosen.update(known)
        elif r in FAMILIES:
            chosen.update(n for n in known if n.startswith(r + "_"))
        else:
            key = r.replace(".", "_")
            key = key if key in known else "feynman_" + key
            if key not in known:
                raise SystemExit(f"unknown problem {r!r}: give a name such as feynman_I_9_18, I.9.18, "
                                 f"nguyen_3 or keijzer_4, or one of {', '.join(FAMILIES)}, all")
            chosen.add(key)
    return [n for n in known if n in chosen][::every]


def problem_seed(name: str, seed: int) -> int:
    """A fixed seed per problem (independent of which other problems run), below 2**31 for every engine."""
    return mix_seed(zlib.crc32(name.encode()), seed) % (2**31 - 1)


def variable_symbols(name: str) -> list[sympy.Symbol]:
    """x0, x1, ...: positive where the problem samples the variable from a non-negative interval."""
    return [sympy.Symbol(f"x{k}", positive=True) if lo >= 0 else sympy.Symbol(f"x{k}", real=True)
            for k, (lo, _) in enumerate(datasets.ranges(name))]


def problem_data(name: str, rows: int, noise: float, seed: int) -> dict:
    """The problem's 75/25 split, noise (sd = noise x RMS(y_train)) on the training targets only, and the
    true formula over x0, x1, ..."""
    pseed = problem_seed(name, seed)
    X, y, names, formula = datasets.sample(name, rows, seed=pseed)
    split = datasets.from_arrays(X, y, feature_names=names, test_size=0.25, seed=pseed, name=name,
                                 formula=formula)
    y_train = split.y_train
    if noise:
        rng = np.random.default_rng(mix_seed(pseed, round(noise * 1e9)))
        y_train = y_train + rng.normal(0.0, noise * float(np.sqrt(np.mean(y_train**2))), y_train.shape)
    symbols = variable_symbols(name)
    truth = sympy.sympify(formula, locals=dict(zip(names, symbols)))
    return {"X_train": split.X_train, "y_train": y_train, "X_test": split.X_test, "y_test": split.y_test,
            "feature_names": names, "symbols": symbols, "truth": truth, "seed": pseed}


# ---------------------------------------------------------------- sympy: rounding, size, equivalence
def round_floats(expr: sympy.Expr, decimals: int = 3, zero: float = 1e-4, max_denominator: int = 10
                 ) -> sympy.Expr:
    """SRBench's rounding: floats below ``zero`` in magnitude become 0, the others are rounded to
    ``decimals`` decimal places; before that, one within 1e-6 (relative) of p/q, q <= ``max_denominator``,
    becomes that fraction (so ``x**2.0`` reads ``x**2``)."""
    reps = {}
    for a in expr.atoms(sympy.Float):
        v = float(a)
        if not math.isfinite(v):
            continue
        frac = Fraction(v).limit_denominator(max_denominator)
        if abs(float(frac) - v) <= 1e-6 * max(1.0, abs(v)):
            reps[a] = sympy.Rational(frac.numerator, frac.denominator)
        else:
            reps[a] = sympy.Integer(0) if abs(v) < zero else sympy.Float(round(v, decimals))
    return expr.xreplace(reps)


def model_length(expr: sympy.Expr) -> int:
    """Nodes of ``expr`` in sympy's preorder traversal (SRBench's complexity)."""
    return sum(1 for _ in sympy.preorder_traversal(expr))


def _constant(e: sympy.Expr) -> bool:
    try:
        return e.is_constant() is True
    except (TypeError, ValueError, ZeroDivisionError, NotImplementedError):
        return False


def symbolic_solution(model: sympy.Expr, truth: sympy.Expr) -> bool:
    """SRBench's symbolic solution: model - truth simplifies to a constant, or model / truth to a nonzero
    constant. Rounds the model's floats first (``round_floats``); no time cap (see ``assess``)."""
    model = round_floats(sympy.sympify(model))
    if model.has(sympy.nan, sympy.zoo, sympy.oo, -sympy.oo):
        return False
    if _constant(sympy.simplify(truth - model, ratio=1)):
        return True
    ratio = sympy.simplify(model / truth, ratio=1)
    return _constant(ratio) and ratio != 0


def capped(fn, timeout: float):
    """Runs ``fn(send)`` in a forked child; ``send(key, value)`` reports results as they come. Returns the
    reports and whether the child finished (it is killed at ``timeout`` seconds). Without fork (Windows),
    ``fn`` runs here, uncapped."""
    got: dict = {}
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        fn(lambda k, v: got.__setitem__(k, v))
        return got, True
    recv, send_end = ctx.Pipe(duplex=False)

    def child():
        try:
            fn(lambda k, v: send_end.send((k, v)))
            send_end.send(("__done__", True))
        except BaseException as e:  # noqa: BLE001  reported to the parent, never raised in the child
            send_end.send(("error", f"{type(e).__name__}: {str(e)[:200]}"))
            send_end.send(("__done__", True))

    proc = ctx.Process(target=child, daemon=True)
    proc.start()
    send_end.close()
    deadline, done = time.monotonic() + timeout, False
    while not done:
        left = deadline - time.monotonic()
        if left <= 0 or not recv.poll(left):
            break
        try:
            k, v = recv.recv()
        except EOFError:  # the child died (e.g. out of memory)
            break
        done = k == "__done__"
        if not done:
            got[k] = v
    if proc.is_alive():
        proc.kill()
    proc.join()
    recv.close()
    return got, done


def assess(model: sympy.Expr | None, truth: sympy.Expr, r2: float | None, timeout: float) -> dict:
    """The model's rounded and simplified form, its length, and whether it is a symbolic solution."""
    if model is None:
        return {"model": None, "model_length": None, "symbolic_solution": False}
    rounded = round_floats(model)
    out = {"model": str(rounded), "model_length": model_length(rounded), "symbolic_solution": False}
    check = r2 is not None and r2 > CHECK_R2

    def work(send):
        simple = sympy.simplify(rounded, ratio=1)
        send("simplified", (str(simple), model_length(simple)))
        if check:
            send("symbolic", symbolic_solution(rounded, truth))

    got, done = capped(work, timeout)
    if "simplified" in got:
        out["model_simplified"], out["model_length"] = got["simplified"]
    out["symbolic_solution"] = bool(got.get("symbolic", False))
    if "error" in got:
        out["sympy"] = got["error"]
    elif not done:
        out["sympy"] = f"timeout after {timeout:g} s" + ("" if "simplified" in got else
                                                         " (length of the unsimplified model)")
    elif not check:
        out["sympy"] = f"not checked: test R^2 <= {CHECK_R2}"
    return out


def r2_score(y: np.ndarray, pred) -> float | None:
    """Test R^2 (sklearn's), or None where the predictions are not finite."""
    from sklearn.metrics import r2_score as sk_r2

    pred = np.broadcast_to(np.asarray(pred, dtype=np.float64).ravel(), y.shape)
    if not np.isfinite(pred).all():
        return None
    v = float(sk_r2(y, pred))
    return v if math.isfinite(v) else None


# ---------------------------------------------------------------- engines
def engine_problem(name: str) -> str | None:
    """None when the engine can run here, else why not and what installs it."""
    if name == "gprl":
        return None
    import importlib.util

    if importlib.util.find_spec(PIP[name]) is None:
        return f"not installed; pip install {PIP[name]}"
    return None


def by_name(expr: sympy.Expr, symbols: list[sympy.Symbol]) -> sympy.Expr:
    """``expr`` over the problem's symbols (an engine's own x0, x1, ... replaced by name)."""
    named = {s.name: s for s in symbols}
    return expr.xreplace({s: named[s.name] for s in expr.free_symbols if s.name in named})


def fit_gprl(d: dict, T: float, a) -> dict:
    params = {"generations": GENERATIONS, **a.gprl_params}
    est = gprl.SymbolicRegressor(time_limit=T, functions=a.functions, random_state=d["seed"], device=a.device,
                                 **params)
    t0 = time.perf_counter()
    est.fit(d["X_train"], d["y_train"])
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "pred": est.predict(d["X_test"]), "generations": int(est.n_generations_),
            "model": lambda: by_name(est.sympy(), d["symbols"])}


def fit_pyoperon(d: dict, T: float, a) -> dict:
    from pyoperon.sklearn import SymbolicRegressor

    names = {"log": "logabs", "sqrt": "sqrtabs"}  # gprl's log|a| and sqrt|a|
    symbols = ",".join([names.get(f, f) for f in a.functions] + ["constant", "variable"])
    est = SymbolicRegressor(allowed_symbols=symbols, max_time=max(1, int(T)), n_threads=a.threads,
                            random_state=d["seed"], generations=GENERATIONS, max_evaluations=10**15)
    t0 = time.perf_counter()
    est.fit(d["X_train"], d["y_train"])
    seconds = time.perf_counter() - t0

    def model():
        k = d["X_train"].shape[1]
        text = est.get_model_string(est.model_, 12, [f"x{j}" for j in range(k)]).replace("^", "**")
        local = {s.name: s for s in d["symbols"]}
        local.update(abs=sympy.Abs, sqrt=sympy.sqrt, log=sympy.log, exp=sympy.exp, sin=sympy.sin,
                     cos=sympy.cos, tan=sympy.tan)
        return sympy.parse_expr(text, local_dict=local)

    return {"seconds": seconds, "pred": est.predict(d["X_test"]), "generations": None, "model": model}


def _gplearn_exp(a):
    return np.exp(np.minimum(a, 100.0))  # bounded like gplearn's own protected functions: no overflow


GPLEARN_SYMPY = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
                 "div": lambda a, b: a / b, "sqrt": lambda a: sympy.sqrt(sympy.Abs(a)),
                 "log": lambda a: sympy.log(sympy.Abs(a)), "exp": sympy.exp, "sin": sympy.sin,
                 "cos": sympy.cos, "tan": sympy.tan}


def gplearn_sympy(program: list, symbols: list[sympy.Symbol]) -> sympy.Expr:
    """A gplearn program (prefix list of functions, feature indices and float constants) in its reading form
    (protected division and log as plain ones, as gprl's ``sympy()``)."""
    stack: list = []
    for node in reversed(program):
        if isinstance(node, (int, np.integer)):
            stack.append(symbols[int(node)])
        elif isinstance(node, (float, np.floating)):
            stack.append(sympy.Float(float(node)))
        else:
            args = [stack.pop() for _ in range(node.arity)]
            stack.append(GPLEARN_SYMPY[node.name](*args))
    return stack[0]


def fit_gplearn(d: dict, T: float, a) -> dict:
    from gplearn.functions import make_function
    from gplearn.genetic import SymbolicRegressor

    fset = [make_function(function=_gplearn_exp, name="exp", arity=1, wrap=False) if f == "exp" else f
            for f in a.functions]
    # its protected functions compute the unprotected value first: numpy's overflow warnings are noise, also
    # in the worker processes (which inherit this when they start)
    os.environ.setdefault("PYTHONWARNINGS", "ignore::RuntimeWarning")
    est = SymbolicRegressor(function_set=fset, n_jobs=a.threads, random_state=d["seed"], warm_start=True,
                            generations=1)
    g = 0
    t0 = time.perf_counter()
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        while g == 0 or time.perf_counter() - t0 < T:
            g += 1
            est.set_params(generations=g)
            est.fit(d["X_train"], d["y_train"])
    seconds = time.perf_counter() - t0
    with np.errstate(all="ignore"):
        pred = est.predict(d["X_test"])
    return {"seconds": seconds, "pred": pred, "generations": g,
            "model": lambda: gplearn_sympy(est._program.program, d["symbols"])}


def fit_pysr(d: dict, T: float, a) -> dict:
    import inspect

    from pysr import PySRRegressor

    ops = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
    kw = {"binary_operators": [ops[f] for f in a.functions if f in ops],
          "unary_operators": [f for f in a.functions if f not in ops], "timeout_in_seconds": T,
          "niterations": 10**7, "procs": a.threads, "random_state": d["seed"], "verbosity": 0,
          "progress": False}
    accepted = inspect.signature(PySRRegressor).parameters
    est = PySRRegressor(**{k: v for k, v in kw.items() if k in accepted})
    t0 = time.perf_counter()
    est.fit(d["X_train"], d["y_train"])
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "pred": est.predict(d["X_test"]), "generations": None,
            "model": lambda: by_name(sympy.sympify(est.sympy()), d["symbols"])}


FITS = {"gprl": fit_gprl, "pyoperon": fit_pyoperon, "gplearn": fit_gplearn, "pysr": fit_pysr}


def warm_up(name: str, a) -> None:
    """One untimed fit on a tiny problem: kernel compilation, worker processes, JIT."""
    rng = np.random.default_rng(0)
    X = rng.uniform(1, 2, (64, 2))
    d = {"X_train": X, "y_train": X[:, 0] * X[:, 1], "X_test": X, "seed": 0,
         "symbols": sympy.symbols("x0 x1", positive=True)}
    with contextlib.redirect_stdout(io.StringIO()):
        FITS[name](d, 1.0, a)


# ---------------------------------------------------------------- results: keys, summary, files
def key(r: dict) -> tuple:
    return r["engine"], r["device"], r["problem"], float(r["noise"]), float(r["time_limit"])


def summarize(results: list[dict]) -> list[dict]:
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        if "skipped" not in r:
            groups.setdefault((r["engine"], r["device"], float(r["noise"]), float(r["time_limit"])),
                              []).append(r)
    out = []
    order = (lambda k: (ENGINES.index(k[0]) if k[0] in ENGINES else len(ENGINES), *k))
    for (eng, dev, noise, T), rows in sorted(groups.items(), key=lambda kv: order(kv[0])):
        lengths = [r["model_length"] for r in rows if r.get("model_length") is not None]
        r2 = [r["r2_test"] if r["r2_test"] is not None else -math.inf for r in rows]
        med_r2 = statistics.median(r2)
        out.append({"engine": eng, "device": dev, "noise": noise, "time_limit": T, "problems": len(rows),
                    "accuracy_solution_rate": round(sum(r["accuracy_solution"] for r in rows) / len(rows), 4),
                    "symbolic_solution_rate": round(sum(r["symbolic_solution"] for r in rows) / len(rows), 4),
                    "median_model_length": statistics.median(lengths) if lengths else None,
                    "median_fit_seconds": round(statistics.median(r["fit_seconds"] for r in rows), 3),
                    "median_r2_test": round(med_r2, 6) if math.isfinite(med_r2) else None})
    return out


def write(doc: dict, path: str | None) -> None:
    """Atomically: a run stopped mid-write keeps the previous file."""
    if not path:
        return
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, p)


def reassess(doc: dict, timeout: float) -> None:
    """Assesses every entry's stored model again (``assess``; e.g. after a change of the rounding), without
    fitting anything."""
    for r in doc["results"]:
        if r.get("model") is None or r["problem"] not in problem_names():
            continue
        symbols = variable_symbols(r["problem"])
        _, _, names, formula = datasets.sample(r["problem"], 1, seed=0)
        truth = sympy.sympify(formula, locals=dict(zip(names, symbols)))
        model = sympy.sympify(r["model"], locals={s.name: s for s in symbols})
        for k in ("model_simplified", "sympy"):
            r.pop(k, None)
        r.update(assess(model, truth, r.get("r2_test"), timeout))


def merge(doc: dict, files: list[str]) -> None:
    """Adds other runs' entries (e.g. gprl on a GPU beside CPU peers) not already present, marked with their
    source."""
    have = {key(r) for r in doc["results"]}
    for f in files:
        other = json.loads(Path(f).read_text())
        if other.get("benchmark") != "srbench":
            raise SystemExit(f"{f} is not a bench_srbench.py document")
        doc.setdefault("merged_from", []).append({"file": str(f), "machine": other.get("machine"),
                                                  "versions": other.get("versions")})
        for r in other["results"]:
            if key(r) not in have:
                doc["results"].append({**r, "source": str(f)})
                have.add(key(r))
        for k, v in (other.get("versions") or {}).items():
            doc["versions"].setdefault(k, v)


def plot(doc: dict, path: str) -> None:
    """Bars per engine (device) and noise level: the two solution rates, median model length and fit time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = doc["summary"]
    if not summary:
        return
    engines = list(dict.fromkeys((s["engine"], s["device"]) for s in summary))  # summary order
    levels = sorted({(s["noise"], s["time_limit"]) for s in summary})
    panels = [("accuracy_solution_rate", "accuracy solutions (test R$^2$ > 0.999)"),
              ("symbolic_solution_rate", "symbolic solutions"),
              ("median_model_length", "median model length (sympy nodes)"),
              ("median_fit_seconds", "median fit seconds")]
    fig, axes = plt.subplots(1, 4, figsize=(4.2 * 4, 4.6))
    width = 0.8 / len(levels)
    for ax, (field, title) in zip(axes, panels):
        for j, (noise, T) in enumerate(levels):
            xs, ys, counts = [], [], []
            for i, (eng, dev) in enumerate(engines):
                s = next((s for s in summary if (s["engine"], s["device"], s["noise"], s["time_limit"]) ==
                          (eng, dev, noise, T)), None)
                if s is not None and s[field] is not None:
                    xs.append(i + (j - (len(levels) - 1) / 2) * width)
                    ys.append(s[field])
                    counts.append(s["problems"])
            label = f"noise {noise:g}" + (f", {T:g} s" if len({t for _, t in levels}) > 1 else "")
            bars = ax.bar(xs, ys, width, color=plt.cm.tab10(j % 10), label=label)
            if field.endswith("rate"):
                for b, n in zip(bars, counts):
                    ax.text(b.get_x() + b.get_width() / 2, b.get_height(), f"n={n}", ha="center",
                            va="bottom", fontsize=6)
        ax.set_xticks(range(len(engines)))
        ax.set_xticklabels([f"{e}\n({d})" for e, d in engines], fontsize=8)
        ax.set_title(title, fontsize=9)
        if field.endswith("rate"):
            ax.set_ylim(0, 1.05)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize=7)
    budgets = ", ".join(f"{t:g}" for t in sorted({t for _, t in levels}))
    # the machines the entries ran on: this run's (where it fitted anything) and the merged files'
    ran = [doc["machine"]] if any("source" not in r for r in doc["results"]) else []
    names = []
    for m in ran + [s["machine"] for s in doc.get("merged_from", []) if s.get("machine")]:
        name = f"{m['gpu']} + {m['cpu']} ({m['threads']} threads)" if m.get("gpu") else \
            f"{m['cpu']} ({m['threads']} threads)"
        if name not in names:
            names.append(name)
    fig.suptitle(f"SRBench ground-truth protocol, {budgets} s per problem; " + "; ".join(names), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- main
def engine_label(engine: str, a) -> tuple[str, str]:
    """An engine's name in the results (gprl's carries --gprl-tag) and its device."""
    if engine != "gprl":
        return engine, "cpu"
    return (f"gprl:{a.gprl_tag}" if a.gprl_tag else "gprl"), a.device


def run_one(engine: str, name: str, d: dict, noise: float, a) -> dict:
    label, device = engine_label(engine, a)
    row = {"engine": label, "device": device, "threads": a.threads, "problem": name,
           "family": name.split("_")[0], "noise": noise, "time_limit": a.time, "seed": d["seed"],
           "n_features": len(d["feature_names"]), "feature_names": d["feature_names"],
           "train_rows": len(d["y_train"]), "test_rows": len(d["y_test"]), "true_model": str(d["truth"])}
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # peers print progress
            fit = FITS[engine](d, a.time, a)
    except Exception as e:  # noqa: BLE001  one failing fit must not lose the other results
        row["skipped"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        return row
    r2 = r2_score(d["y_test"], fit["pred"])
    try:
        model = fit["model"]()
    except Exception as e:  # noqa: BLE001  a model the converter cannot read counts as no formula
        model = None
        row["model_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    row.update({"fit_seconds": round(fit["seconds"], 3), "generations": fit["generations"], "r2_test": r2,
                "accuracy_solution": r2 is not None and r2 > ACCURACY_R2})
    row.update(assess(model, d["truth"], r2, a.sympy_timeout))
    return row


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", nargs="+", default=None,
                    help="names (feynman_I_9_18 or I.9.18, nguyen_3, ...) or feynman, nguyen, keijzer, all "
                         "(default: all; with --merge and no --problems nothing is run)")
    ap.add_argument("--every", type=int, default=1, help="run every K-th of the selected problems")
    ap.add_argument("--noise", type=float, nargs="+", default=[0.0],
                    help="target noise levels (sd = level x RMS of the training y)")
    ap.add_argument("--time", type=float, default=10.0, help="wall-clock seconds per fit")
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES,
                    help="engines to run; those not installed are skipped with a note")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="gprl's device")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="CPU threads: torch's, pyoperon's n_threads, gplearn's n_jobs, PySR's procs")
    ap.add_argument("--functions", nargs="+", default=list(FUNCTIONS), choices=SUPPORTED,
                    help="the function set of every engine")
    ap.add_argument("--rows", type=int, default=10_000, help="rows per problem (75%% train, 25%% test)")
    ap.add_argument("--seed", type=int, default=0, help="mixed with each problem's name into its seed")
    ap.add_argument("--reassess", action="store_true",
                    help="assess the stored models of every entry again (no fitting), e.g. with --merge")
    ap.add_argument("--gprl-params", type=json.loads, default={}, metavar="JSON",
                    help='SymbolicRegressor settings over the defaults, e.g. \'{"population_size": 20000}\'')
    ap.add_argument("--gprl-tag", default="", help="gprl's rows are engine 'gprl:TAG' (settings compared)")
    ap.add_argument("--sympy-timeout", type=float, default=30.0,
                    help="seconds for the simplification and equivalence check of one model")
    ap.add_argument("--out", default=None, help="JSON file, rewritten after every entry")
    ap.add_argument("--resume", action="store_true", help="keep --out's entries and run only missing ones")
    ap.add_argument("--merge", nargs="+", default=[], metavar="FILE.json",
                    help="add the entries of other bench_srbench.py documents to the summary and plot")
    ap.add_argument("--plot", default=None, help="write a PNG here")
    ap.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    a = ap.parse_args(argv)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error("--device cuda but CUDA is not available")
    if a.resume and not a.out:
        ap.error("--resume needs --out")
    if a.every < 1 or a.rows < 8 or a.time <= 0 or a.threads < 1:
        ap.error("--every and --threads must be >= 1, --rows >= 8, --time > 0")
    if a.problems is None:
        a.problems = [] if a.merge else ["all"]
    if a.threads != torch.get_num_threads():  # only when it changes (see bench_compare.py)
        torch.set_num_threads(a.threads)

    log = progress_log(a.quiet)
    problems = select_problems(a.problems, a.every)
    engines, skipped = available(a.engines, engine_problem, log)
    doc = {
        "benchmark": "srbench",
        "created": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(a.threads, a.device),
        "versions": {"torch": torch.__version__, "numpy": np.__version__, "sympy": sympy.__version__,
                     **{n: engine_version(n) for n in engines}},
        "skipped_engines": skipped,
        "settings": {k: v for k, v in vars(a).items() if k not in ("quiet", "resume", "merge")},
        "protocol": {"split": "75/25 train/test, seed fixed per problem",
                     "noise": "N(0, (level x RMS(y_train))^2) added to the training targets only",
                     "accuracy_solution": f"test R^2 > {ACCURACY_R2}",
                     "symbolic_solution": "model - truth or model / truth (nonzero) simplifies to a "
                                          f"constant, floats rounded; checked where test R^2 > {CHECK_R2}",
                     "model_length": "nodes of the simplified model in sympy's preorder traversal"},
        "results": [],
    }
    if a.resume and Path(a.out).exists():
        old = json.loads(Path(a.out).read_text())
        if old.get("benchmark") != "srbench":
            raise SystemExit(f"{a.out} is not a bench_srbench.py document")
        for k in ("rows", "functions", "seed"):  # entries are keyed without these: they must agree
            if old["settings"].get(k) != doc["settings"][k]:
                raise SystemExit(f"--resume: {a.out} was run with --{k} {old['settings'].get(k)}, "
                                 f"not {doc['settings'][k]}; use another --out")
        doc["results"] = [r for r in old["results"] if "skipped" not in r]  # failed entries run again
        for k in ("created", "machine", "versions"):
            doc[f"resumed_{k}"] = old.get(f"resumed_{k}", []) + [old.get(k)]
    done = {key(r) for r in doc["results"]}
    for name in engines:
        if any((*engine_label(name, a), p, float(n), float(a.time)) not in done
               for p in problems for n in a.noise):
            try:
                warm_up(name, a)
            except Exception as e:  # noqa: BLE001  e.g. a peer that imports but cannot start
                skipped[name] = f"warm-up failed: {type(e).__name__}: {str(e)[:200]}"
                log(f"{name}: skipped ({skipped[name]})")
    engines = [e for e in engines if e not in skipped]
    for i, name in enumerate(problems):
        for noise in a.noise:
            todo = [e for e in engines
                    if (*engine_label(e, a), name, float(noise), float(a.time)) not in done]
            if not todo:
                continue
            d = problem_data(name, a.rows, noise, a.seed)
            for eng in todo:
                row = run_one(eng, name, d, noise, a)
                doc["results"].append(row)
                doc["summary"] = summarize(doc["results"])
                doc["machine"]["load_average_at_end"] = [round(v, 2) for v in os.getloadavg()]
                write(doc, a.out)
                log(f"[{i + 1}/{len(problems)}] {name} noise {noise:g} {eng}: " +
                    (f"skipped: {row['skipped']}" if "skipped" in row else
                     f"R2 {row['r2_test'] if row['r2_test'] is None else round(row['r2_test'], 5)}, "
                     f"{'exact' if row['symbolic_solution'] else 'not exact'}, "
                     f"length {row['model_length']}, {row['fit_seconds']:.1f} s: {row['model']}"))
    merge(doc, a.merge)
    if a.reassess:
        reassess(doc, a.sympy_timeout)
    doc["summary"] = summarize(doc["results"])
    write(doc, a.out)
    print(json.dumps({"summary": doc["summary"], "out": a.out} if a.out else doc, indent=1))
    if a.plot:
        plot(doc, a.plot)
    return doc


if __name__ == "__main__":
    main()
