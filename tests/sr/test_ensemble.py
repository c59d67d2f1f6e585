"""SymbolicClassifier(ensemble_size=K): K independent islands, the model is the mean of one formula per
island; its exported formula reproduces decision_function and is the mean of the member rows' formulas."""

import numpy as np
import pytest
import sympy

import gprl

KW = {"population_size": 200, "generations": 8, "random_state": 0, "device": "cpu"}


def _evaluate(expr, X):
    symbols = [sympy.Symbol(f"x{k}", real=True) for k in range(X.shape[1])]
    f = sympy.lambdify(symbols, expr, modules=[gprl.functions.NUMPY_FUNCTIONS, "numpy"])
    return np.broadcast_to(np.asarray(f(*X.T), dtype=np.float64), (len(X),))


@pytest.mark.parametrize("name", ["breast_cancer", "wine"])
def test_ensemble_formula_is_the_mean_of_its_members(name):
    data = gprl.datasets.load(name, seed=0)
    est = gprl.SymbolicClassifier(ensemble_size=3, **KW).fit(data.X_train, data.y_train)
    eq = est.equations_
    assert len(est.members_) == 3 and set(eq["island"]) == {0, 1, 2}
    assert list(np.flatnonzero(eq["member"])) == sorted(est.members_)
    assert [eq["island"][i] for i in est.members_] == [0, 1, 2]  # one member per island
    assert est.best_index_ in est.members_
    dec = est.decision_function(data.X_test).reshape(len(data.X_test), -1)
    model = est.sympy(protected=True)
    model = model if isinstance(model, list) else [model]
    z = np.stack([_evaluate(e, data.X_test) for e in model], axis=1)
    np.testing.assert_allclose(z, dec, rtol=1e-3, atol=1e-3 * (1 + np.abs(dec).max()))
    rows = []
    for i in est.members_:
        e = est.sympy(index=int(i), protected=True)
        rows.append(np.stack([_evaluate(x, data.X_test) for x in (e if isinstance(e, list) else [e])],
                             axis=1))
    np.testing.assert_allclose(np.mean(rows, axis=0), dec, rtol=1e-3, atol=1e-3 * (1 + np.abs(dec).max()))
    assert isinstance(est.latex(), (str, list))


def test_one_island_is_the_plain_run():
    data = gprl.datasets.load("breast_cancer", seed=1)
    one = gprl.SymbolicClassifier(ensemble_size=1, **KW).fit(data.X_train, data.y_train)
    plain = gprl.SymbolicClassifier(**KW).fit(data.X_train, data.y_train)
    assert "island" not in one.equations_.columns and list(one.members_) == [one.best_index_]
    assert str(one.sympy()) == str(plain.sympy())
    three = gprl.SymbolicClassifier(ensemble_size=3, **KW).fit(data.X_train, data.y_train)
    # island 0 of an ensemble is the plain run: same seed, same front
    island0 = three.equations_[three.equations_["island"] == 0]
    assert list(island0["equation"]) == list(one.equations_["equation"])
    with pytest.raises(ValueError, match="ensemble_size"):
        gprl.SymbolicClassifier(ensemble_size=0).fit(data.X_train, data.y_train)
