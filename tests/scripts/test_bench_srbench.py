"""scripts/bench_srbench.py: the symbolic-solution test on hand-written formulas, the time cap on sympy, and a
1-second gprl-only run on two problems (CPU) whose JSON keeps its shape and resumes without rerunning."""

import importlib.util
import json
import time
from pathlib import Path

import numpy as np
import pytest
import sympy

from gprl import datasets

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_srbench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_srbench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_symbolic_solution_on_hand_written_models(bench):
    x0, x1, x2 = bench.variable_symbols("feynman_I_47_23")  # gamma, pr, rho: all sampled in [1, 5]
    truth = sympy.sqrt(x0 * x1 / x2)
    exact = [
        sympy.sqrt(sympy.Abs(x0 * x1 / x2)),  # gprl's protected sqrt: |.| of a positive term
        sympy.sqrt(x0) * sympy.sqrt(x1) / sympy.sqrt(x2),
        sympy.Float(1.0000001) * (x0 * x1 / x2) ** sympy.Float(0.5),  # float32 constants, rounded
        3 * sympy.sqrt(x0 * x1 / x2),  # a constant factor
        sympy.sqrt(x0 * x1 / x2) + sympy.Float(2.5),  # a constant offset
    ]
    wrong = [sympy.sqrt(x0 * x1) / x2, sympy.sqrt(x0 * x1 / x2) + sympy.Float(0.01) * x0,
             sympy.Integer(0), sympy.Float(1.3) * x0 * x1 / x2, x0 + x1 - x2]
    for m in exact:
        assert bench.symbolic_solution(m, truth), m
    for m in wrong:
        assert not bench.symbolic_solution(m, truth), m
    # constants of the truth: 1/(4 pi) found as a float
    k = bench.variable_symbols("feynman_II_3_24")
    flux = datasets.feynman.BY_KEY["feynman_II_3_24"].formula
    truth = sympy.sympify(flux, locals={"Pwr": k[0], "r": k[1]})
    assert bench.symbolic_solution(sympy.Float(0.0795775) * k[0] / k[1] ** 2, truth)
    assert not bench.symbolic_solution(sympy.Float(0.0795775) * k[0] / k[1] ** 3, truth)
    # a variable that takes negative values keeps its |.|: sqrt|x| is not sqrt(x) on [-1, 1]
    (x,) = bench.variable_symbols("nguyen_1")
    assert not bench.symbolic_solution(sympy.sqrt(sympy.Abs(x)), sympy.sqrt(x))
    assert bench.round_floats(sympy.Float(2.0000001) * x ** sympy.Float(0.4999999)) == 2 * sympy.sqrt(x)
    assert bench.model_length(x ** 2 + 1) == 5  # Add(Pow(x, 2), 1)


def test_sympy_time_cap_kills_a_hung_child(bench):
    t0 = time.monotonic()

    def work(send):
        send("first", 1)
        time.sleep(30)
        send("never", 2)

    got, done = bench.capped(work, 0.5)
    assert got == {"first": 1} and not done and time.monotonic() - t0 < 5


def test_gprl_run_shape_and_resume(bench, tmp_path):
    out = tmp_path / "sr.json"
    args = ["--engines", "gprl", "--device", "cpu", "--threads", "1", "--problems", "nguyen_8", "I.12.1",
            "--time", "1", "--rows", "400", "--noise", "0", "0.01", "--quiet", "--out", str(out)]
    doc = bench.main([*args, "--plot", str(tmp_path / "sr.png")])
    assert doc == json.loads(out.read_text())
    assert doc["benchmark"] == "srbench" and doc["versions"]["gprl"] and doc["machine"]["threads"] == 1
    rows = doc["results"]
    assert [(r["problem"], r["noise"]) for r in rows] == [
        ("feynman_I_12_1", 0.0), ("feynman_I_12_1", 0.01), ("nguyen_8", 0.0), ("nguyen_8", 0.01)]
    for r in rows:
        assert r["engine"] == "gprl" and r["device"] == "cpu" and r["train_rows"] == 300
        assert r["test_rows"] == 100 and 0.5 < r["fit_seconds"] < 10 and r["generations"] >= 1
        assert isinstance(r["model"], str) and r["model_length"] >= 1
        assert r["accuracy_solution"] == (r["r2_test"] is not None and r["r2_test"] > 0.999)
        assert isinstance(r["symbolic_solution"], bool)
    assert rows[0]["true_model"] == "x0*x1" and rows[0]["feature_names"] == ["mu", "Nn"]
    (s0, s1) = doc["summary"]
    assert (s0["noise"], s1["noise"]) == (0.0, 0.01) and s0["problems"] == s1["problems"] == 2
    for s in (s0, s1):
        mine = [r for r in rows if r["noise"] == s["noise"]]
        assert s["accuracy_solution_rate"] == sum(r["accuracy_solution"] for r in mine) / 2
        assert s["symbolic_solution_rate"] == sum(r["symbolic_solution"] for r in mine) / 2
    assert (tmp_path / "sr.png").stat().st_size > 0

    t0 = time.monotonic()
    again = bench.main([*args, "--resume"])  # every entry is there: nothing runs
    assert again["results"] == rows and time.monotonic() - t0 < 5


def test_noise_goes_to_training_targets_only(bench):
    clean, noisy = (bench.problem_data("nguyen_1", 400, level, 0) for level in (0.0, 0.1))
    np.testing.assert_array_equal(clean["X_train"], noisy["X_train"])
    np.testing.assert_array_equal(clean["y_test"], noisy["y_test"])
    sd = np.std(noisy["y_train"] - clean["y_train"])
    rms = np.sqrt(np.mean(clean["y_train"] ** 2))
    assert 0.8 * 0.1 * rms < sd < 1.2 * 0.1 * rms
