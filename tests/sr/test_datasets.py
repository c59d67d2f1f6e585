"""gprl.datasets: benchmark definitions against their formulas, the sklearn sets, the user's CSV/arrays."""

import numpy as np
import pytest
import sympy
from sklearn import datasets as skd

import gprl
from gprl import datasets as D


def test_names_cover_the_issue():
    names = set(D.names())
    assert {"koza_quartic", "pagie_1", "feynman_I_9_18", "diabetes", "wine", "breast_cancer", "iris",
            "digits"} <= names
    assert {f"nguyen_{k}" for k in range(1, 13)} <= names and {f"keijzer_{k}" for k in range(1, 16)} <= names
    assert len([n for n in names if n.startswith("feynman_") and n != "feynman_I_9_18"]) >= 20


def test_feynman_I_9_18_rows_follow_the_formula_and_ranges():
    data = D.load("feynman_I_9_18", n_samples=2000, test_size=0.25, seed=1)
    assert data.feature_names == ["m1", "m2", "G", "x1", "x2", "y1", "y2", "z1", "z2"]
    assert data.X_train.shape == (1500, 9) and data.X_test.shape == (500, 9)
    m1, m2, G, x1, x2, y1, y2, z1, z2 = data.X_train.T
    np.testing.assert_allclose(data.y_train, G * m1 * m2 / ((x2 - x1) ** 2 + (y2 - y1) ** 2 + (z2 - z1) ** 2))
    lo = np.array([1, 1, 1, 3, 1, 3, 1, 3, 1])
    assert (data.X_train >= lo).all() and (data.X_train <= lo + 1).all()


@pytest.mark.parametrize("key", [e.key for e in gprl.feynman.EQUATIONS])
def test_every_feynman_equation_generates_finite_rows(key):
    eq = gprl.feynman.BY_KEY[key]
    data = D.load(key, n_samples=200)
    assert np.isfinite(data.y_train).all() and data.n_features == len(eq.variables)
    for j, (_, lo, hi) in enumerate(eq.variables):
        assert lo <= data.X_train[:, j].min() and data.X_train[:, j].max() <= hi


def test_synthetic_benchmarks_match_their_definitions():
    q = D.load("koza_quartic", seed=3)
    x = q.X_train[:, 0]
    assert q.X_train.shape == (20, 1) and (np.abs(x) <= 1).all()
    np.testing.assert_allclose(q.y_train, x**4 + x**3 + x**2 + x)
    x0 = sympy.Symbol("x0", real=True)  # the features are real symbols, as in the estimators' formulas
    assert sympy.simplify(q.expression() - (x0**4 + x0**3 + x0**2 + x0)) == 0
    n7 = D.load("nguyen_7")
    assert (n7.X_train >= 0).all() and (n7.X_train <= 2).all()
    np.testing.assert_allclose(n7.y_train, np.log(n7.X_train[:, 0] + 1) + np.log(n7.X_train[:, 0] ** 2 + 1))
    assert D.load("nguyen_9").X_train.shape == (100, 2)
    p = D.load("pagie_1")
    assert p.X_train.shape == (26 * 26, 2)
    x, y = p.X_train.T
    np.testing.assert_allclose(p.y_train, 1 / (1 + x**-4.0) + 1 / (1 + y**-4.0))
    k6 = D.load("keijzer_6")
    np.testing.assert_allclose(k6.y_train[:3], [1, 1.5, 1 + 1 / 2 + 1 / 3])
    k5 = D.load("keijzer_5")
    assert k5.X_train.shape == (1000, 3) and (k5.X_train[:, 1] >= 1).all()
    k11 = D.load("keijzer_11")
    assert k11.X_test.shape == (601 * 601, 2)


@pytest.mark.parametrize("name", ["diabetes", "wine", "breast_cancer", "iris", "digits"])
def test_sklearn_sets_are_split_stratified(name):
    data = D.load(name, test_size=0.25, seed=0)
    bunch = getattr(skd, f"load_{name}")()
    assert len(data.X_train) + len(data.X_test) == len(bunch.data)
    assert data.feature_names == [str(f) for f in bunch.feature_names]
    if data.task == "classification":
        full = np.bincount(bunch.target) / len(bunch.target)
        np.testing.assert_allclose(np.bincount(data.y_test) / len(data.y_test), full, atol=0.05)


def test_csv_loader_selects_columns_and_rejects_bad_data(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "d.csv"
    a, b, c = rng.normal(size=(3, 40))
    lines = ["a,b,c,label,target"] + [f"{a[i]},{b[i]},{c[i]},{'xy'[i % 2]},{a[i] * 2}" for i in range(40)]
    path.write_text("\n".join(lines))
    data = D.load_csv(path, target="target", features=["a", "c"], test_size=0.25, seed=0)
    assert data.feature_names == ["a", "c"] and data.X_train.shape == (30, 2)
    np.testing.assert_allclose(data.y_train, 2 * data.X_train[:, 0])
    cls = D.load_csv(path, target="label", features=["a", "b"], task="classification")
    assert set(cls.classes) == {"x", "y"}
    with pytest.raises(ValueError, match=r"non-numeric columns \['label'\]"):
        D.load_csv(path, target="target")
    with pytest.raises(ValueError, match="column 'nope'"):
        D.load_csv(path, target="nope")
    path.write_text("a,t\n1,2\n,3\n4,5\n")
    with pytest.raises(ValueError, match=r"NaN or inf .* columns \['a'\]"):
        D.load_csv(path, target="t")
    np.save(tmp_path / "d.npy", np.column_stack([a, 3 * b]))
    arr = D.load_csv(tmp_path / "d.npy", target=1, test_size=0)
    np.testing.assert_allclose(arr.y_train, 3 * b) and np.testing.assert_allclose(arr.X_train[:, 0], a)


def test_from_arrays_errors():
    with pytest.raises(ValueError, match="only one class"):
        D.from_arrays(np.zeros((4, 1)), np.ones(4), task="classification")
    with pytest.raises(ValueError, match="different numbers of rows"):
        D.from_arrays(np.zeros((4, 1)), np.ones(3))
    with pytest.raises(ValueError, match="unknown dataset"):
        D.load("nguyen_99")


@pytest.mark.parametrize("name", ["feynman_I_9_18", "nguyen_7", "keijzer_5", "keijzer_6", "keijzer_11"])
def test_sample_draws_rows_in_the_ranges_from_the_formula(name):
    X, y, names, formula = D.sample(name, 500, seed=2)
    lo, hi = np.array(D.ranges(name)).T
    assert X.shape == (500, len(names)) and y.shape == (500,)
    assert (X >= lo).all() and (X <= hi).all() and (X.min(axis=0) < lo + 0.2 * (hi - lo)).all()
    symbols = [sympy.Symbol(n, real=True) for n in names]
    expr = sympy.sympify(formula, locals=dict(zip(names, symbols)))
    if name == "keijzer_6":  # the harmonic sum over integers
        assert (X == np.round(X)).all()
        np.testing.assert_allclose(y, [float(sympy.harmonic(int(v))) for v in X[:, 0]])
    else:
        np.testing.assert_allclose(y, sympy.lambdify(symbols, expr, "numpy")(*X.T))
    np.testing.assert_array_equal(D.sample(name, 500, seed=2)[0], X)  # the seed fixes the rows
    assert D.ranges("keijzer_5") == [(-1.0, 1.0), (1.0, 2.0), (-1.0, 1.0)]
    with pytest.raises(ValueError, match="unknown generated benchmark"):
        D.sample("wine", 10)
