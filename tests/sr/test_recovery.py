"""Exact recovery and held-out accuracy with small CPU budgets (sized for CI).

Recovery uses each benchmark's own terminal set (no constants for the Koza quartic and Nguyen-1..4, as in
their papers) and the arithmetic function set; equivalence is sympy's, after simplification."""

import numpy as np
import pytest
import sympy
from sklearn.metrics import accuracy_score

import gprl


@pytest.mark.parametrize("name", ["koza_quartic", "nguyen_1", "nguyen_2", "nguyen_3", "nguyen_4"])
def test_exact_recovery_in_most_seeds(name):
    recovered = []
    for seed in range(10):
        data = gprl.datasets.load(name, seed=seed)
        model = gprl.SymbolicRegressor(const_prob=0.0 if not data.constants else 0.2, target_loss=1e-12,
                                       random_state=seed).fit(data.X_train, data.y_train)
        recovered.append(sympy.simplify(model.sympy() - data.expression()) == 0)
    assert sum(recovered) >= 8, f"{name}: recovered in {sum(recovered)}/10 seeds"


@pytest.mark.parametrize("name", ["wine", "breast_cancer"])
def test_default_classifier_held_out_accuracy(name):
    data = gprl.datasets.load(name, seed=0)
    model = gprl.SymbolicClassifier(random_state=0).fit(data.X_train, data.y_train)
    acc = accuracy_score(data.y_test, model.predict(data.X_test))
    assert acc >= 0.93, f"{name}: held-out accuracy {acc:.3f}"
    # the exported formulas reproduce the fitted model's decision values
    exprs = model.sympy(protected=True)
    exprs = exprs if isinstance(exprs, list) else [exprs]
    symbols = [sympy.Symbol(f"x{k}", real=True) for k in range(data.n_features)]
    fns = [sympy.lambdify(symbols, e, modules=[gprl.functions.NUMPY_FUNCTIONS, "numpy"]) for e in exprs]
    z = np.stack([np.broadcast_to(f(*data.X_test.T), (len(data.X_test),)) for f in fns], axis=1)
    dec = model.decision_function(data.X_test).reshape(len(data.X_test), -1)
    np.testing.assert_allclose(z, dec, rtol=1e-3, atol=1e-3 * (1 + np.abs(dec).max()))
