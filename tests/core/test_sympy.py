"""Symbolic form: to_sympy -> lambdify reproduces forward; from_expressions round-trips."""

import numpy as np
import pytest
import sympy
import torch

from gprl import Population
from gprl.core.functions import BY_NAME, NUMPY_FUNCTIONS

ALL = list(BY_NAME)


def lambdified(pop, i, names):
    exprs = pop.to_sympy(i, names=names)
    symbols = [sympy.Symbol(n, real=True) for n in names]
    return [sympy.lambdify(symbols, e, modules=[NUMPY_FUNCTIONS, "numpy"]) for e in exprs]


def assert_matches_where_conditioned(got, want, rtol=1e-5):
    """Values agree to rtol except where float32 rounding decides them (compared in float64 and float32)."""
    got, want = np.broadcast_to(np.asarray(got, np.float64), want.shape), np.asarray(want, np.float64)
    huge = np.abs(want) > 1e30  # overflow: the kernel saturates at float32's max, float64 does not
    close = np.abs(got - want) <= rtol * np.maximum(np.abs(want), np.abs(got)) + 1e-6
    return (close | huge).mean()


@pytest.mark.parametrize("n_out", [1, 3])
def test_lambdify_reproduces_forward(n_out):
    rng = np.random.default_rng(n_out)
    pop = Population.random(300, 3, n_out, max_len=32, max_depth=4, functions=ALL, const_range=(-2, 2),
                            output_prob=0.5, seed=n_out)
    X = rng.uniform(-3, 3, size=(50, 3)).astype(np.float32)
    Y = pop.forward(torch.from_numpy(X)).double().numpy()
    names = ["a", "b", "c"]
    agree = []
    for i in range(len(pop)):
        fns = lambdified(pop, i, names)
        with np.errstate(all="ignore"):
            for k, fn in enumerate(fns):
                got = fn(*(X[:, j].astype(np.float64) for j in range(3)))
                agree.append(assert_matches_where_conditioned(got, Y[i, :, k]))
    # float64 evaluation differs from float32 only at rounding-decided points (comparisons, tan poles)
    assert np.mean(agree) > 0.995 and np.min(agree) > 0.5


def test_protected_functions_lambdify_exactly():
    X = np.array([[0.0, 1e-7], [-1e-7, 2.0], [0.5, -3.0], [-4.0, 0.0], [2.0, 0.5]], np.float32)
    exprs = ["pdiv(x0, x1)", "pinv(x0)", "plog(x0)", "sqrt(Abs(x0))", "Abs(x0)**x1", "Max(x0, x1)",
             "Piecewise((1, x0 < x1), (-1, True))", "Piecewise((x1, x0 > 0), (x0, True))", "lt(x0, x1)",
             "gt(x0, x1)", "ifpos(x0 - 1, x1, x0)"]
    pop = Population.from_expressions(exprs, n_in=2)
    Y = pop.forward(torch.from_numpy(X))[:, :, 0].numpy()
    for i in range(len(exprs)):
        (fn,) = lambdified(pop, i, ["x0", "x1"])
        with np.errstate(all="ignore"):
            got = np.broadcast_to(fn(X[:, 0].astype(np.float64), X[:, 1].astype(np.float64)), (5,))
        np.testing.assert_allclose(got, Y[i], rtol=1e-6, err_msg=exprs[i])
    assert [int(pop.code[i, 0]) for i in (8, 9, 10)] == [BY_NAME[n].id for n in ("lt", "gt", "if")]


def test_from_expressions_of_to_sympy_evaluates_identically():
    pop = Population.random(500, 4, 3, max_len=40, max_depth=5, functions=ALL, const_range=(-2, 2),
                            output_prob=0.4, seed=9)
    exprs = [pop.to_sympy(i) for i in range(len(pop))]
    back = Population.from_expressions(exprs, n_in=4, max_len=256)
    assert (back.validate() == 0).all()
    X = torch.from_numpy(np.random.default_rng(0).uniform(-3, 3, size=(40, 4)).astype(np.float32))
    a, b = pop.forward(X).double(), back.forward(X).double()
    close = (a - b).abs() <= 1e-5 * torch.maximum(a.abs(), b.abs()) + 1e-6
    assert float(close.double().mean()) > 0.995  # rare rounding-decided points aside (tests/reference)


def test_from_expressions_strings_names_and_errors():
    pop = Population.from_expressions(["speed*2 - sin(angle)", "angle/2"], names=["speed", "angle"])
    assert pop.n_in == 2 and pop.n_out == 1
    torch.testing.assert_close(pop.forward(torch.tensor([[1.0, 0.5]]))[:, 0, 0],
                               torch.tensor([2 - np.sin(0.5), 0.25], dtype=torch.float32))
    with pytest.raises(ValueError, match="same number of output"):
        Population.from_expressions(["x0", ("x0", "x1")])
    multi = Population.from_expressions([("x0 + 1", "x1*x0", "3")], n_in=2)
    X = torch.tensor([[2.0, 5.0]])
    torch.testing.assert_close(multi.forward(X)[0, 0], torch.tensor([3.0, 10.0, 3.0]))
    x0, x1 = sympy.symbols("x0 x1", real=True)
    assert [sympy.nsimplify(e) for e in multi.to_sympy(0)] == [x0 + 1, x0 * x1, 3]
    with pytest.raises(ValueError, match="cannot encode"):
        Population.from_expressions(["gamma(x0)"])
    with pytest.raises(ValueError, match="unknown variable"):
        Population.from_expressions(["y + 1"], names=["x"])
    with pytest.raises(ValueError, match="cannot parse"):
        Population.from_expressions(["x0 +* 1"])
    with pytest.raises(ValueError, match="raise max_len"):
        Population.from_expressions(["x0*x1*x2*x3"], max_len=3)


def test_unprotected_reading_form():
    pop = Population.from_expressions(["pdiv(x0, x1) + plog(x0)"])
    assert str(pop.to_sympy(0, protected=False)[0]) in ("x0/x1 + log(Abs(x0))", "log(Abs(x0)) + x0/x1")


def test_comparisons_of_equal_arguments_fold():
    pop = Population.from_expressions(["gt(x0, x0) + lt(x0*2, x0*2)"], n_in=1)
    assert float(pop.to_sympy(0)[0]) == -2.0
    torch.testing.assert_close(pop.forward(torch.tensor([[3.0]]))[0, 0, 0], torch.tensor(-2.0))


@pytest.mark.parametrize("text, piece", [
    ('__import__("pathlib").Path(MARKER).touch() or x0', "__import__"),
    ("x0.__class__", "x0.__class__"),
    ("(lambda: x0)()", "lambda"),
    ("[x0][0]", "[x0]"),
    ("x0 if x1 else x1", "x0 if x1 else x1"),
    ("Symbol('x0')", "Symbol"),
    ("sin('x0')", "'x0'"),
])
def test_strings_are_parsed_not_evaluated(tmp_path, text, piece):
    marker = tmp_path / "marker"
    text = text.replace("MARKER", repr(str(marker)))
    with pytest.raises(ValueError, match="not allowed|not a gprl function") as err:
        Population.from_expressions([text], n_in=2)
    assert not marker.exists()
    assert str(err.value).startswith(f"expression {text[:20]!r}"[:-1]) and piece in str(err.value)


def test_string_syntax_that_is_allowed():
    x0, x1 = sympy.symbols("x0 x1", real=True)
    texts = ["pi*x0 - E", "x0^2 + max(x0, x1, 2)", "Piecewise((x1, x0 > 0), (x0, True))",
             "ite(x0, 1.5e-3, -x1)", "+x0", "sqrt(x0)**2", " + ".join(["x0"] * 1500)]  # long: no recursion
    pop = Population.from_expressions(texts, n_in=2)
    assert sympy.nsimplify(pop.to_sympy(1)[0]) == x0**2 + sympy.Max(x0, x1, 2)  # ^ binds like **
    X = torch.tensor([[-3.0, 2.0], [0.5, -1.0]])
    got = pop.forward(X)[:, :, 0]
    want = torch.tensor([[-np.pi * 3 - np.e, 11.0, -3.0, -2.0, -3.0, 3.0, -4500.0],
                         [np.pi * 0.5 - np.e, 2.25, -1.0, 1.5e-3, 0.5, 0.5, 750.0]]).T.float()
    torch.testing.assert_close(got, want)  # sqrt(x0)**2 is |x0|: the kernel's sqrt protects
    with pytest.raises(ValueError, match="has 2 argument.*sin takes 1 argument"):
        Population.from_expressions(["sin(x0, x1)"])
    with pytest.raises(ValueError, match="'y' is an unknown variable"):
        Population.from_expressions(["y + oo"])
    with pytest.raises(ValueError, match="cannot parse expression 'Piecewise\\(\\)'"):
        Population.from_expressions(["Piecewise()"])


@pytest.mark.parametrize("text, want", [("x0**5", -32.0), ("x0**7", -128.0), ("x0**-5", -1 / 32),
                                        ("x0**3", -8.0), ("(x0 + 1)**9", -1.0), ("2*x0**-7", -1 / 64),
                                        ("pow(x0, 5)", 32.0)])  # pow is |a|**b, as the function table says
def test_integer_powers_are_products_and_keep_their_sign(text, want):
    pop = Population.from_expressions([text], n_in=1, max_len=64)
    assert BY_NAME["pow"].id not in pop.code[(pop.kind & 3) == 3].tolist()
    assert float(pop.forward(torch.tensor([[-2.0]]))[0, 0, 0]) == pytest.approx(want, rel=1e-6)
    back = Population.from_expressions(pop.to_sympy(0), n_in=1, max_len=64)
    assert float(back.forward(torch.tensor([[-2.0]]))[0, 0, 0]) == pytest.approx(want, rel=1e-6)


def test_integer_powers_too_long_for_max_len():
    assert Population.from_expressions(["x0**10"], max_len=19).lengths().tolist() == [19]
    with pytest.raises(ValueError, match="max_len=18"):
        Population.from_expressions(["x0**10"], max_len=18)
    with pytest.raises(ValueError, match="max_len"):
        Population.from_expressions(["x0**3000"])  # 5999 nodes: more than any max_len
    with pytest.raises(ValueError, match="max_len"):
        Population.from_expressions(["x0**1000000000"])  # fails at once, building nothing
    with pytest.raises(ValueError, match="too large"):
        Population.from_expressions(["(3*x0)**1000000000 + 7**7**7**7"])
