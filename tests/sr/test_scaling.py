"""Logistic output scaling (gprl.sr.scaling): the batched Newton fit against scikit-learn, the objective's
use of it, and a scaled classifier's exported formula."""

import numpy as np
import pytest
import sympy
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss

import gprl
from gprl.sr.scaling import fit_logistic_scaling


def _outputs(n_out: int, seed: int):
    data = gprl.datasets.load("wine" if n_out == 3 else "breast_cancer", seed=seed)
    X = (data.X_train - data.X_train.mean(0)) / data.X_train.std(0)
    codes = np.unique(data.y_train, return_inverse=True)[1]
    pop = gprl.Population.random(30, X.shape[1], n_out, functions=["add", "sub", "mul", "div"],
                                 output_prob=0.5, seed=seed)
    return X, codes, pop, pop.forward(torch.tensor(X, dtype=torch.float32))


def test_binary_scaling_is_sklearn_logistic_regression():
    _, codes, pop, out = _outputs(1, 0)
    n = len(codes)
    a, b = fit_logistic_scaling(out, torch.tensor(codes), torch.full((n,), 1 / n), ridge=1 / n,
                                dtype=torch.float64)
    checked = 0
    for i in range(len(pop)):
        f = out[i, :, 0].double().numpy()
        if f.std() < 1e-6 * (1 + abs(f.mean())):
            continue
        z = (f - f.mean()) / f.std()
        # ridge 1/n on the z-scored output's scale is LogisticRegression(C=1) on it
        lr = LogisticRegression(C=1.0, tol=1e-12, max_iter=10_000).fit(z[:, None], codes)
        scale = lr.coef_[0, 0] / f.std()
        assert b[i, 0].item() == pytest.approx(scale, rel=1e-4, abs=1e-8)
        assert a[i, 0].item() == pytest.approx(lr.intercept_[0] - scale * f.mean(), rel=1e-4, abs=1e-4)
        checked += 1
    assert checked >= 20


def test_softmax_scaling_is_stationary():
    _, codes, pop, out = _outputs(3, 1)
    n, y = len(codes), torch.tensor(codes)
    a, b = fit_logistic_scaling(out, y, torch.full((n,), 1 / n), ridge=1 / n, dtype=torch.float64)
    f = out.double()
    sd = f.std(1, unbiased=False)
    for i in range(len(pop)):
        if not (sd[i] > 1e-6).all():
            continue
        # in the z-scored parameters (a + b * mean, b * sd) the penalised loss has zero gradient at the fit
        theta = torch.cat([a[i] + b[i] * f[i].mean(0), b[i] * sd[i]]).requires_grad_()
        z = (f[i] - f[i].mean(0)) / sd[i]
        loss = torch.nn.functional.cross_entropy(theta[:3] + theta[3:] * z, y) \
            + 0.5 / n * (theta[3:] ** 2).sum() + 0.5e-6 * (theta[:3] ** 2).sum()
        (grad,) = torch.autograd.grad(loss, theta)
        assert grad.abs().max().item() < 1e-7


def test_objective_scores_the_calibrated_trees_and_accepts_fixed_coefficients():
    X, codes, pop, out = _outputs(1, 2)
    plain = gprl.ClassificationObjective(X, codes, 2)
    scaled = gprl.ClassificationObjective(X, codes, 2, scaling=True)
    a, b = scaled.coefficients(pop)
    logits = (a[:, None] + b[:, None] * out.double())[..., 0].numpy()
    loss = scaled(pop).numpy()
    for i in range(len(pop)):
        p = 1 / (1 + np.exp(-logits[i]))
        assert loss[i] == pytest.approx(log_loss(codes, p), rel=1e-4)
    assert (loss <= plain(pop).numpy() + 1e-5).all()  # the fit never does worse than the raw tree (a=0, b=1)
    np.testing.assert_allclose(scaled(pop, (a, b)).numpy(), loss, rtol=1e-5)
    np.testing.assert_allclose(scaled(pop, (a * 0, b * 0 + 1)).numpy(), plain(pop).numpy(), rtol=1e-5)
    with pytest.raises(ValueError, match="coefficients must be"):
        scaled(pop, (a[:3], b[:3]))
    with pytest.raises(ValueError, match="ridge"):
        gprl.ClassificationObjective(X, codes, 2, scaling=True, ridge=0.0)


@pytest.mark.parametrize("name", ["breast_cancer", "wine"])
def test_scaled_classifier_formula_reproduces_predictions(name):
    data = gprl.datasets.load(name, seed=0)
    est = gprl.SymbolicClassifier(population_size=300, generations=10, linear_scaling=True, random_state=0)
    est.fit(data.X_train, data.y_train)
    dec = est.decision_function(data.X_test).reshape(len(data.X_test), -1)
    exprs = est.sympy(protected=True)
    exprs = exprs if isinstance(exprs, list) else [exprs]
    symbols = [sympy.Symbol(f"x{k}", real=True) for k in range(data.n_features)]
    fns = [sympy.lambdify(symbols, e, modules=[gprl.functions.NUMPY_FUNCTIONS, "numpy"]) for e in exprs]
    z = np.stack([np.broadcast_to(f(*data.X_test.T), (len(data.X_test),)) for f in fns], axis=1)
    np.testing.assert_allclose(z, dec, rtol=1e-3, atol=1e-3 * (1 + np.abs(dec).max()))
    # each front row's loss is the cross-entropy of its own (scaled) formula on the training rows
    for i in range(len(est.equations_)):
        ex = est.sympy(index=i, protected=True)
        ex = ex if isinstance(ex, list) else [ex]
        zs = np.stack([np.broadcast_to(sympy.lambdify(symbols, e, modules=[gprl.functions.NUMPY_FUNCTIONS,
                                                                              "numpy"])(*data.X_train.T),
                                       (len(data.X_train),)) for e in ex], axis=1)
        proba = np.column_stack([0 * zs[:, 0], zs[:, 0]]) if zs.shape[1] == 1 else zs
        proba = np.exp(proba - proba.max(1, keepdims=True))
        proba /= proba.sum(1, keepdims=True)
        assert est.equations_["loss"][i] == pytest.approx(log_loss(data.y_train, proba, labels=est.classes_),
                                                          rel=2e-3)
