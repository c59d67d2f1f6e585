"""Local constant optimisation (gprl.evolve.constants): Levenberg–Marquardt on trees' constants against known
optima (scikit-learn's unpenalised logistic regression, least squares, least absolute deviations), the
regression objective's derivatives, the monotone loss guarantee, and the classifier and regressor options."""

import numpy as np
import pytest
import sympy
import torch
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression, QuantileRegressor
from sklearn.metrics import log_loss

import gprl
from gprl.evolve.constants import best_distinct, constant_slots, optimize_constants


def _logistic_data(seed: int = 0, n: int = 600):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    z = 2.5 * X[:, 0] - 0.7 * X[:, 1] + 0.3
    return X, (rng.uniform(size=n) < 1 / (1 + np.exp(-z))).astype(int)


def test_wrong_constants_go_to_the_maximum_likelihood_fit():
    X, y = _logistic_data()
    objective = gprl.ClassificationObjective(X, y, 2)
    # the right shape with wrong constants (and a tree without constants, which must be returned unchanged)
    trees = gprl.Population.from_expressions(["1.0*x0 - 1.0*x1 + 0.5", "x0 - x1"], n_in=2)
    before = objective(trees)
    tuned, loss = optimize_constants(trees, objective, iterations=15)
    lr = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10_000).fit(X, y)
    optimum = log_loss(y, lr.predict_proba(X))
    assert loss[0] < before[0] - 0.05
    assert loss[0].item() == pytest.approx(optimum, abs=1e-5)
    got = np.sort(tuned.value[0][(tuned.kind[0] & 3) == gprl.core.population.CONST].numpy())
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
        has_const = ((pop.kind & 3) == gprl.core.population.CONST).any(1) & torch.isfinite(before)
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
    est = gprl.SymbolicClassifier(optimize_constants=4, optimize_every=2, **kw).fit(data.X_train,
                                                                                     data.y_train)
    plain = gprl.SymbolicClassifier(**kw).fit(data.X_train, data.y_train)
    assert est.equations_["loss"].min() < plain.equations_["loss"].min()
    symbols = [sympy.Symbol(f"x{k}", real=True) for k in range(data.n_features)]
    f = sympy.lambdify(symbols, est.sympy(protected=True), modules=[gprl.functions.NUMPY_FUNCTIONS, "numpy"])
    dec = est.decision_function(data.X_test)
    np.testing.assert_allclose(np.broadcast_to(f(*data.X_test.T), dec.shape), dec, rtol=1e-3,
                               atol=1e-3 * (1 + np.abs(dec).max()))
    with pytest.raises(ValueError, match="optimize_constants"):
        gprl.SymbolicClassifier(optimize_constants=-1).fit(data.X_train, data.y_train)


# ---- regression ----
def _quadratic_data(seed: int = 0, n: int = 300, noise: float = 0.05):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, size=(n, 2))
    return X, 2.5 * X[:, 0] ** 2 - 0.7 * X[:, 1] + 1.2 + noise * rng.normal(size=n)


def _constants(trees, i: int = 0) -> np.ndarray:
    """Tree ``i``'s constants in prefix order."""
    return trees.value[i][(trees.kind[i] & 3) == gprl.core.population.CONST].numpy()


def _weighted_lstsq(F, y, w=None):
    sw = np.sqrt(np.ones(len(y)) if w is None else w)[:, None]
    return np.linalg.lstsq(F * sw, y * sw[:, 0], rcond=None)[0]


def _reference_loss(out, y, w, metric):
    """The kernel's loss from outputs [P, D, M] in float64 torch:
    weighted mean over rows, mean over outputs."""
    e = out - y[None]
    m = ((e.abs() if metric == "mae" else e * e) * w[None, :, None]).sum(1) / w.sum()
    return (m.sqrt() if metric == "rmse" else m).mean(-1)


@pytest.mark.parametrize("metric", ["mse", "rmse", "mae"])
@pytest.mark.parametrize("weighted", [False, True])
def test_regression_terms_are_the_gradient_of_the_kernel_loss(metric, weighted):
    X, y = _quadratic_data(n=120)
    Y = np.column_stack([y, X[:, 0] - X[:, 1]])
    w = np.random.default_rng(1).uniform(0.2, 2.0, len(y)) if weighted else None
    objective = gprl.RegressionObjective(X, Y, w, metric=metric)
    trees = gprl.Population.from_expressions([["0.5*x0*x0 + 0.1*x1 - 0.3", "x0 + 0.2"], ["x1", "x0*x1"]],
                                             n_in=2)
    out = trees.forward(objective.data.X).double().requires_grad_()
    ww = torch.ones(len(y), dtype=torch.float64) if w is None else objective.data.weight.double()
    loss = _reference_loss(out, objective.data.y.double(), ww, metric)
    np.testing.assert_allclose(loss.detach().numpy(), objective(trees).numpy(), rtol=1e-6)
    grad, = torch.autograd.grad(loss.sum(), out)
    g, h = objective.gauss_newton_terms(out.detach())
    assert g.dtype == h.dtype == torch.float64 and h.shape == (2, 120, 2, 2)
    np.testing.assert_allclose(g.numpy(), grad.numpy(), rtol=1e-9, atol=1e-15)
    assert ((h.diagonal(dim1=2, dim2=3) >= 0).all()
            and (h.sum((2, 3)) == h.diagonal(dim1=2, dim2=3).sum(-1)).all())
    if metric == "mse":  # exact: the loss is quadratic in the outputs
        M, W = 2, ww.sum()
        np.testing.assert_allclose(h.diagonal(dim1=2, dim2=3).numpy(),
                                   (2 * ww / (M * W))[None, :, None].expand(2, -1, 2).numpy(), rtol=1e-12)
    # non-finite outputs give zero terms (the others are unchanged)
    bad = out.detach().clone()
    bad[0, 3, 0], bad[1, 5, 1] = float("nan"), float("inf")
    g2, h2 = objective.gauss_newton_terms(bad)
    assert g2[0, 3, 0] == 0 and h2[0, 3, 0, 0] == 0 and g2[1, 5, 1] == 0 and h2[1, 5, 1, 1] == 0
    assert torch.isfinite(g2).all() and torch.isfinite(h2).all()
    if metric == "mse":
        assert torch.equal(g2[0, 4], g[0, 4])


def test_wrong_regression_constants_go_to_the_least_squares_fit():
    X, y = _quadratic_data()
    objective = gprl.RegressionObjective(X, y)
    trees = gprl.Population.from_expressions(["0.5*x0*x0 + 0.1*x1 - 0.3", "x0*x0"], n_in=2)
    before = objective(trees)
    tuned, loss = optimize_constants(trees, objective, iterations=8)
    coef = _weighted_lstsq(np.column_stack([X[:, 0] ** 2, X[:, 1], np.ones(len(y))]), y)
    np.testing.assert_allclose(_constants(tuned), coef * [1, 1, -1], rtol=1e-4)  # the tree reads "... - c"
    optimum = np.mean((np.column_stack([X[:, 0] ** 2, X[:, 1], np.ones(len(y))]) @ coef - y) ** 2)
    assert loss[0] < 0.01 * before[0]
    assert loss[0].item() == pytest.approx(optimum, rel=1e-4)
    assert tuned[1].equal(trees[1]) and loss[1] == before[1]  # no constants: unchanged
    np.testing.assert_allclose(objective(tuned).numpy(), loss.numpy(), rtol=1e-6)


@pytest.mark.parametrize("metric", ["mse", "rmse"])
def test_weighted_two_output_constants_go_to_the_weighted_least_squares_fit(metric):
    X, y = _quadratic_data(seed=1)
    rng = np.random.default_rng(2)
    Y = np.column_stack([y, 3.0 * X[:, 1] - 0.4 * X[:, 0] * X[:, 1] + 0.1 * rng.normal(size=len(y))])
    w = rng.uniform(0.0, 3.0, len(y))
    objective = gprl.RegressionObjective(X, Y, w, metric=metric)
    trees = gprl.Population.from_expressions([["0.5*x0*x0 + 0.1*x1 - 0.3", "1.0*x1 + 0.2*x0*x1"]], n_in=2)
    before = objective(trees)
    tuned, loss = optimize_constants(trees, objective, iterations=10)
    # each output's constants are its own, so mse and rmse (a mean of per-output roots) share the optimum: the
    # weighted least-squares fit of each output (from_expressions builds output 1 as "e_1 + 0": the 0 is a
    # constant, its intercept)
    F0 = np.column_stack([X[:, 0] ** 2, X[:, 1], np.ones(len(y))])
    F1 = np.column_stack([X[:, 1], X[:, 0] * X[:, 1], np.ones(len(y))])
    fit = np.column_stack([F0 @ _weighted_lstsq(F0, Y[:, 0], w), F1 @ _weighted_lstsq(F1, Y[:, 1], w)])
    np.testing.assert_allclose(tuned.forward(objective.data.X)[0].numpy(), fit, rtol=0, atol=2e-4)
    m = (w[:, None] * (fit - Y) ** 2).sum(0) / w.sum()
    optimum = np.mean(np.sqrt(m) if metric == "rmse" else m)
    assert loss[0] < 0.05 * before[0]
    assert loss[0].item() == pytest.approx(optimum, rel=1e-4)
    np.testing.assert_allclose(objective(tuned).numpy(), loss.numpy(), rtol=1e-6)


def test_mae_steps_go_to_the_least_absolute_deviations_fit():
    rng = np.random.default_rng(3)
    X, _ = _quadratic_data(seed=3)
    y = 2.5 * X[:, 0] ** 2 - 0.7 * X[:, 1] + 1.2 + 0.05 * rng.standard_t(1.5, size=len(X))  # heavy tails
    objective = gprl.RegressionObjective(X, y, metric="mae")
    trees = gprl.Population.from_expressions(["0.5*x0*x0 + 0.1*x1 - 0.3"], n_in=2)
    before = objective(trees)
    tuned, loss = optimize_constants(trees, objective, iterations=20)
    F = np.column_stack([X[:, 0] ** 2, X[:, 1]])
    lad = QuantileRegressor(quantile=0.5, alpha=0.0, solver="highs").fit(F, y)
    optimum = np.mean(np.abs(lad.predict(F) - y))
    assert loss[0] < 0.05 * before[0]
    assert loss[0].item() == pytest.approx(optimum, rel=1e-4)
    np.testing.assert_allclose(objective(tuned).numpy(), loss.numpy(), rtol=1e-6)


def test_regressor_option_lowers_the_loss_and_keeps_the_formula_exact():
    X, y = _quadratic_data(n=200)
    tuned_losses, plain_losses = [], []
    for seed in range(3):
        # linear scaling off: it fits the outer offset and scale itself, and this measures the option alone
        kw = {"population_size": 200, "generations": 8, "random_state": seed, "linear_scaling": False}
        est = gprl.SymbolicRegressor(optimize_constants=4, optimize_every=2, **kw).fit(X, y)
        plain = gprl.SymbolicRegressor(**kw).fit(X, y)
        tuned_losses.append(est.equations_["loss"].min())
        plain_losses.append(plain.equations_["loss"].min())
        symbols = [sympy.Symbol(f"x{k}", real=True) for k in range(2)]
        f = sympy.lambdify(symbols, est.sympy(protected=True),
                           modules=[gprl.functions.NUMPY_FUNCTIONS, "numpy"])
        pred = est.predict(X)
        np.testing.assert_allclose(np.broadcast_to(f(*X.T), pred.shape), pred, rtol=1e-4,
                                   atol=1e-4 * (1 + np.abs(pred).max()))
    assert sum(tuned_losses) < 0.5 * sum(plain_losses), (tuned_losses, plain_losses)


@pytest.mark.parametrize("Est", [gprl.SymbolicRegressor, gprl.SymbolicClassifier])
def test_constant_options_follow_the_sklearn_contract(Est):
    est = Est(optimize_constants=3, optimize_every=2, optimizer_iterations=5)
    params = est.get_params()
    assert ((params["optimize_constants"], params["optimize_every"], params["optimizer_iterations"])
            == (3, 2, 5))
    assert clone(est).get_params() == params
    est.set_params(optimize_constants=0, optimizer_iterations=1)
    assert (est.optimize_constants, est.optimizer_iterations) == (0, 1)
    default = Est().get_params()
    assert ((default["optimize_constants"], default["optimize_every"], default["optimizer_iterations"])
            == (0, 1, 8))
    X, y = _quadratic_data(n=40)
    y = y if Est is gprl.SymbolicRegressor else (y > np.median(y)).astype(int)
    for name, bad in (("optimize_constants", -1), ("optimize_constants", 1.5), ("optimize_constants", True),
                      ("optimize_every", 0), ("optimizer_iterations", 0), ("optimizer_iterations", "8")):
        with pytest.raises(ValueError, match=name):
            Est(population_size=10, generations=1, **{name: bad}).fit(X, y)
