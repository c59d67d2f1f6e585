"""Local constant optimisation (gprl.constants): Levenberg–Marquardt on trees' constants against known optima
(scikit-learn's unpenalised logistic regression), the monotone loss guarantee, and the classifier option."""

import numpy as np
import pytest
import sympy
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

import gprl
from gprl.constants import best_distinct, constant_slots, optimize_constants


def _logistic_data(seed: int = 0, n: int = 600):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    z = 2.5 * X[:, 0] - 0.7 * X[:, 1] + 0.3
    return X, (rng.uniform(size=n) < 1 / (1 + np.exp(-z))).astype(int)


def test_wrong_constants_go_to_the_maximum_likelihood_fit():
    X, y = _logistic_data()
    objective = gprl.ClassificationObjective(X, y, 2)
    # the right shape with wrong constants (and a tree without constants, which must come back unchanged)
    trees = gprl.Population.from_expressions(["1.0*x0 - 1.0*x1 + 0.5", "x0 - x1"], n_in=2)
    before = objective(trees)
    tuned, loss = optimize_constants(trees, objective, iterations=15)
    lr = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10_000).fit(X, y)
    optimum = log_loss(y, lr.predict_proba(X))
    assert loss[0] < before[0] - 0.05
    assert loss[0].item() == pytest.approx(optimum, abs=1e-5)
    got = np.sort(tuned.value[0][(tuned.kind[0] & 3) == gprl.population.CONST].numpy())
    want = np.sort(np.r_[lr.coef_[0, 0], -lr.coef_[0, 1], lr.intercept_[0]])  # x0*c0 - x1*c1 + c2
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)
    assert tuned[1].equal(trees[1]) and loss[1] == before[1]
    # the returned losses are the objective's for the returned trees
    np.testing.assert_allclose(objective(tuned).numpy(), loss.numpy(), rtol=1e-6)


def test_softmax_and_scaled_objectives_decrease_monotonically():
    data = gprl.datasets.load("wine", seed=0)
    X = (data.X_train - data.X_train.mean(0)) / data.X_train.std(0)
    codes = np.unique(data.y_train, return_inverse=True)[1]
    pop = gprl.Population.random(40, X.shape[1], 3, functions=["add", "sub", "mul", "div"], const_prob=0.5,
                                 output_prob=0.5, seed=3)
    for scaling in (False, True):
        objective = gprl.ClassificationObjective(X, codes, 3, scaling=scaling)
        before = objective(pop)
        tuned, loss = optimize_constants(pop, objective, iterations=5)
        assert (loss <= before).all()
        np.testing.assert_allclose(objective(tuned).numpy(), loss.numpy(), rtol=1e-6)
        has_const = ((pop.kind & 3) == gprl.population.CONST).any(1) & torch.isfinite(before)
        improved = (loss[has_const] < before[has_const] - 1e-4).float().mean()
        # unscaled, every tree with a constant can shift or scale its logits; scaled, constants that only
        # shift or scale an output are absorbed by the fitted bias and scale
        assert improved > (0.9 if not scaling else 0.3)
        same = ((tuned.kind == pop.kind) & (tuned.code == pop.code) & (tuned.size == pop.size)).all()
        assert same  # only constants change


def test_constant_slots_and_best_distinct():
    trees = gprl.Population.from_expressions(["0.5*x0 + 2.0", "x0"], n_in=1)
    pos, real = constant_slots(trees)
    assert pos.shape == (2, 2) and real[0].all() and not real[1].any()
    assert sorted(trees.value[0, pos[0]].tolist()) == [0.5, 2.0]
    loss = torch.tensor([3.0, 1.0, 1.0, float("nan"), 2.0, 1.0])
    assert best_distinct(loss, 5).tolist() == [1, 4, 0]


def test_classifier_option_keeps_the_formula_exact():
    data = gprl.datasets.load("breast_cancer", seed=0)
    kw = {"population_size": 200, "generations": 8, "random_state": 0}
    est = gprl.SymbolicClassifier(optimize_constants=4, optimize_every=2, **kw).fit(data.X_train, data.y_train)
    plain = gprl.SymbolicClassifier(**kw).fit(data.X_train, data.y_train)
    assert est.equations_["loss"].min() < plain.equations_["loss"].min()
    symbols = [sympy.Symbol(f"x{k}", real=True) for k in range(data.n_features)]
    f = sympy.lambdify(symbols, est.sympy(protected=True), modules=[gprl.functions.NUMPY_FUNCTIONS, "numpy"])
    dec = est.decision_function(data.X_test)
    np.testing.assert_allclose(np.broadcast_to(f(*data.X_test.T), dec.shape), dec, rtol=1e-3,
                               atol=1e-3 * (1 + np.abs(dec).max()))
    with pytest.raises(ValueError, match="optimize_constants"):
        gprl.SymbolicClassifier(optimize_constants=-1).fit(data.X_train, data.y_train)
