"""SymbolicRegressor / SymbolicClassifier: the scikit-learn contract, exported formulas, model selection,
stopping rules, multi-target and binary/multiclass classification, and clear errors on bad input."""

import pickle
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import sympy
import torch
from scipy.special import logsumexp, softmax
from sklearn.base import clone
from sklearn.metrics import accuracy_score, log_loss, mean_squared_error
from sklearn.utils.estimator_checks import check_estimator

import gprl
from gprl.sr.estimators import pareto_scores, select_model

SMALL = {"population_size": 200, "generations": 10, "random_state": 0}


def _lambdify(expr, names):
    symbols = [sympy.Symbol(n, real=True) for n in names]
    fn = sympy.lambdify(symbols, expr, modules=[gprl.functions.NUMPY_FUNCTIONS, "numpy"])
    return lambda X: np.broadcast_to(np.asarray(fn(*X.T), dtype=np.float64), (len(X),))


@pytest.mark.parametrize("est", [gprl.SymbolicRegressor(population_size=100, generations=5, random_state=0),
                                 gprl.SymbolicClassifier(population_size=100, generations=5, random_state=0)])
def test_sklearn_check_estimator(est):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(est, on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in results if r["status"] == "failed"]
    assert not failed, failed


def test_params_clone_pickle_and_dataframe_names():
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.uniform(-1, 1, (60, 2)), columns=["speed", "mass"])
    y = X["speed"] * X["mass"] + X["speed"]
    est = gprl.SymbolicRegressor(functions=["add", "mul"], const_prob=0.0, **SMALL)
    assert est.get_params()["functions"] == ["add", "mul"]
    assert clone(est).get_params() == est.get_params()
    est.set_params(generations=15)
    assert est.generations == 15
    est.fit(X, y)
    assert est.n_features_in_ == 2 and list(est.feature_names_in_) == ["speed", "mass"]
    assert {s.name for s in est.sympy().free_symbols} <= {"speed", "mass"}
    restored = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(restored.predict(X), est.predict(X))
    with pytest.raises(ValueError, match="X has 3 features, but SymbolicRegressor is expecting 2"), \
            pytest.warns(UserWarning, match="X does not have valid feature names"):
        est.predict(np.zeros((4, 3)))
    # same seed, same model
    again = gprl.SymbolicRegressor(functions=["add", "mul"], const_prob=0.0, **{**SMALL, "generations": 15})
    assert str(again.fit(X, y).sympy()) == str(est.sympy())


def test_predict_reproduces_formula_and_equations_table():
    data = gprl.datasets.load("nguyen_5", seed=1)  # sin(x^2) cos(x) - 1: needs constants and sin/cos
    est = gprl.SymbolicRegressor(functions=["add", "sub", "mul", "div", "sin", "cos"], **SMALL)
    est.fit(data.X_train, data.y_train)
    pred = est.predict(data.X_test)
    np.testing.assert_allclose(_lambdify(est.sympy(protected=True), ["x0"])(data.X_test), pred,
                               rtol=1e-4, atol=1e-5)
    eq = est.equations_
    assert list(eq.columns[:4]) == ["complexity", "loss", "score", "equation"]
    assert (np.diff(eq["complexity"]) > 0).all() and (np.diff(eq["loss"]) < 0).all()  # a Pareto front
    for i in range(len(eq)):  # each row's loss is the MSE of its own formula on the training data
        f = _lambdify(est.sympy(index=i, protected=True), ["x0"])
        np.testing.assert_allclose(eq["loss"][i], mean_squared_error(data.y_train, f(data.X_train)),
                                   rtol=1e-3, atol=1e-7)
    assert isinstance(est.latex(), str) and est.latex()
    assert est.score(data.X_test, data.y_test) == pytest.approx(
        1 - ((data.y_test - pred) ** 2).sum() / ((data.y_test - data.y_test.mean()) ** 2).sum())


def test_model_selection_rules_match_pysr():
    complexity = np.array([1, 3, 5, 9])
    loss = np.array([1.0, 0.1, 0.09, 0.08])
    # score: -dlog(loss)/dcomplexity; 0.1 -> log(10)/2 is the largest drop; 1.5x rule keeps rows 1..3
    np.testing.assert_allclose(pareto_scores(complexity, loss)[1], np.log(10) / 2)
    assert select_model(complexity, loss, "best") == 1
    assert select_model(complexity, loss, "accuracy") == 3
    assert select_model(complexity, np.array([1.0, 0.5, 0.01, 0.009]), "best") == 2  # 0.5 > 1.5 * 0.009


def test_standardize_is_folded_into_the_formula():
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.uniform(100, 200, 80), rng.uniform(-0.01, 0.01, 80)])
    y = X[:, 0] / 100 + 50 * X[:, 1]
    est = gprl.SymbolicRegressor(standardize=True, **SMALL).fit(X, y)
    np.testing.assert_allclose(_lambdify(est.sympy(protected=True), ["x0", "x1"])(X), est.predict(X),
                               rtol=1e-4, atol=1e-4)


def test_multi_target_regression_uses_multi_output_trees():
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, (100, 2))
    Y = np.column_stack([X[:, 0] * X[:, 1], X[:, 0] + X[:, 1]])
    est = gprl.SymbolicRegressor(population_size=500, generations=30, const_prob=0.0,
                                 random_state=0).fit(X, Y)
    pred = est.predict(X)
    assert pred.shape == (100, 2) and est.n_targets_ == 2
    exprs = est.sympy(protected=True)
    assert isinstance(exprs, list) and len(exprs) == 2
    for k in range(2):
        np.testing.assert_allclose(_lambdify(exprs[k], ["x0", "x1"])(X), pred[:, k], rtol=1e-4, atol=1e-5)
    assert est.score(X, Y) > 0.5


def test_sample_weight_ignores_zero_weight_rows():
    data = gprl.datasets.load("nguyen_1", seed=0)
    X = np.vstack([data.X_train, data.X_train])
    y = np.concatenate([data.y_train, np.full(len(data.y_train), 50.0)])  # corrupt half, weighted 0
    w = np.r_[np.ones(len(data.y_train)), np.zeros(len(data.y_train))]
    est = gprl.SymbolicRegressor(const_prob=0.0, target_loss=1e-12, random_state=0).fit(X, y, sample_weight=w)
    assert sympy.simplify(est.sympy() - data.expression()) == 0


def test_early_stop_time_limit_and_validation():
    data = gprl.datasets.load("nguyen_1", seed=0)
    est = gprl.SymbolicRegressor(const_prob=0.0, target_loss=1e-12, generations=500, random_state=0)
    est.fit(data.X_train, data.y_train)
    assert est.n_generations_ < 500
    start = time.monotonic()
    slow = gprl.SymbolicRegressor(generations=10**6, time_limit=1.0, random_state=0)
    slow.fit(data.X_train, data.y_train)
    assert time.monotonic() - start < 20 and slow.n_generations_ < 10**6
    seen = []
    val = gprl.SymbolicRegressor(validation_fraction=0.3, callback=seen.append, **SMALL)
    val.fit(data.X_train, data.y_train)
    assert "train_loss" in val.equations_.columns and len(seen) == SMALL["generations"]
    assert seen[-1]["best_loss"] <= seen[0]["best_loss"]


def test_classifier_binary_string_labels_and_proba():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(200, 3))
    y = np.where(X[:, 0] - 2 * X[:, 1] > 0, "yes", "no")
    est = gprl.SymbolicClassifier(population_size=300, generations=20, random_state=0).fit(X, y)
    assert list(est.classes_) == ["no", "yes"]
    z = est.decision_function(X)
    assert z.shape == (200,)  # one output, sigmoid
    proba = est.predict_proba(X)
    np.testing.assert_allclose(proba[:, 1], 1 / (1 + np.exp(-z)))
    assert set(est.predict(X)) <= {"no", "yes"} and accuracy_score(y, est.predict(X)) > 0.9
    np.testing.assert_allclose(_lambdify(est.sympy(protected=True), ["x0", "x1", "x2"])(X), z,
                               rtol=1e-3, atol=1e-3)


def test_classification_objective_matches_sklearn_losses():
    data = gprl.datasets.load("iris", seed=0)
    X, codes = data.X_train, np.unique(data.y_train, return_inverse=True)[1]
    pop = gprl.Population.random(8, 4, 3, functions=["add", "sub", "mul"], output_prob=0.5, seed=0)
    out = pop.forward(X.astype(np.float32)).double().numpy()  # [P, D, 3]
    ce = gprl.ClassificationObjective(X, codes, 3)(pop).numpy()
    acc = gprl.ClassificationObjective(X, codes, 3, metric="accuracy")(pop).numpy()
    for i in range(8):
        # sklearn's log_loss clips probabilities; where none is extreme it is the exact reference
        nll = logsumexp(out[i], axis=1) - out[i][np.arange(len(codes)), codes]
        assert ce[i] == pytest.approx(nll.mean(), rel=1e-4)
        p = softmax(out[i], axis=1)
        if p.min() > 1e-12:
            assert ce[i] == pytest.approx(log_loss(codes, p, labels=[0, 1, 2]), rel=1e-4)
        assert acc[i] == pytest.approx(1 - accuracy_score(codes, out[i].argmax(1)), abs=1e-6)


@pytest.mark.parametrize("Est", [gprl.SymbolicRegressor, gprl.SymbolicClassifier])
def test_bad_input_raises_clear_errors(Est):
    est = Est(population_size=20, generations=1, random_state=0)
    X, y = np.random.default_rng(0).normal(size=(10, 2)), np.arange(10) % 2
    Xn = X.copy()
    Xn[3, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        est.fit(Xn, y)
    Xi = X.copy()
    Xi[0, 0] = np.inf
    with pytest.raises(ValueError, match="NaN or inf"):
        est.fit(Xi, y)
    with pytest.raises(ValueError, match="different numbers of rows"):
        est.fit(X, y[:-1])
    with pytest.raises(ValueError, match=r"non-numeric columns \['color'\]"):
        est.fit(pd.DataFrame({"a": X[:, 0], "color": ["red"] * 10}), y)
    with pytest.raises(ValueError, match="0 sample"):
        est.fit(np.zeros((0, 2)), np.zeros(0))
    with pytest.raises(ValueError, match="sample_weight"):
        est.fit(X, y, sample_weight=-np.ones(10))
    if Est is gprl.SymbolicRegressor:
        yn = y.astype(float)
        yn[2] = np.nan
        with pytest.raises(ValueError, match="NaN or inf"):
            est.fit(X, yn)
    else:
        with pytest.raises(ValueError, match="only one class"):
            est.fit(X, np.zeros(10))
    with pytest.raises(ValueError, match="population_size"):
        Est(population_size=0).fit(X, y)


TINY = {"population_size": 20, "generations": 1, "random_state": 0}


@pytest.mark.parametrize("Est", [gprl.SymbolicRegressor, gprl.SymbolicClassifier])
def test_predict_checks_feature_names_like_sklearn(Est):
    rng = np.random.default_rng(5)
    X = pd.DataFrame(rng.normal(size=(30, 2)), columns=["a", "b"])
    y = (X["a"] > X["b"]).astype(int)
    est = Est(**TINY).fit(X, y)
    methods = (["predict", "decision_function", "predict_proba"] if Est is gprl.SymbolicClassifier
               else ["predict"])
    for method in methods:
        fn = getattr(est, method)
        with pytest.raises(ValueError, match="must be in the same order as they were in fit"):
            fn(X[["b", "a"]])
        with pytest.raises(ValueError, match="(?s)unseen at fit time:\n- c\n.*yet now missing:\n- b"):
            fn(X.rename(columns={"b": "c"}))
        with pytest.warns(UserWarning, match="does not have valid feature names"):
            fn(X.to_numpy())
    with pytest.raises(ValueError, match="same order"):
        est.score(X[["b", "a"]], y)
    plain = Est(**TINY).fit(X.to_numpy(), y)
    assert not hasattr(plain, "feature_names_in_")
    with pytest.warns(UserWarning, match="X has feature names, but .* was fitted without feature names"):
        plain.predict(X)


@pytest.mark.parametrize("Est", [gprl.SymbolicRegressor, gprl.SymbolicClassifier])
def test_standardize_uses_sample_weight(Est):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(40, 2)) * [1.0, 5.0] + [0.0, 3.0]
    y = (X[:, 0] + 0.2 * X[:, 1] > 0.6).astype(int)
    w = rng.integers(0, 4, 40)
    params = {"standardize": True, "population_size": 50, "generations": 3, "random_state": 0}
    out = "decision_function" if Est is gprl.SymbolicClassifier else "predict"
    # integer weights are repeated rows, and zero-weighted rows (here far-off outliers) are absent rows
    weighted = Est(**params).fit(X, y, sample_weight=w)
    repeated = Est(**params).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    np.testing.assert_allclose(getattr(weighted, out)(X), getattr(repeated, out)(X), rtol=1e-6, atol=1e-9)
    X_out = np.vstack([X, np.tile([1e3, -1e3], (5, 1))])
    zeroed = Est(**params).fit(X_out, np.r_[y, np.ones(5, int)],
                               sample_weight=np.r_[np.ones(40), np.zeros(5)])
    absent = Est(**params).fit(X, y)
    np.testing.assert_allclose(getattr(zeroed, out)(X), getattr(absent, out)(X), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("size", [1e20, 1e39, 1e-20])  # 1e39 is past float32's range, 1e-20**2 below it
def test_targets_of_any_magnitude_are_fitted_in_their_own_units(size):
    rng = np.random.default_rng(7)
    X = rng.uniform(-1, 1, (60, 2))
    # noise keeps the loss away from rounding level (linear scaling fits 2 * x0 + 0.5 exactly)
    y = size * (2 * X[:, 0] + 0.5 + 0.05 * rng.normal(size=60))
    est = gprl.SymbolicRegressor(**SMALL).fit(X, y)
    pred = est.predict(X)
    assert est.score(X, y) > 0.5
    np.testing.assert_allclose(_lambdify(est.sympy(protected=True), ["x0", "x1"])(X), pred,
                               rtol=1e-5, atol=1e-5 * size)
    # the reported losses and the stopping rule are in y's units
    assert est.equations_["loss"][est.best_index_] == pytest.approx(mean_squared_error(y, pred), rel=1e-3)
    stop = gprl.SymbolicRegressor(**{**SMALL, "generations": 50}, target_loss=0.1 * size**2).fit(X, y)
    assert stop.n_generations_ < 50 and mean_squared_error(y, stop.predict(X)) <= 0.1 * size**2


def test_values_past_float32_range_get_their_own_message():
    rng = np.random.default_rng(8)
    X, y = rng.uniform(-1, 1, (30, 2)), rng.uniform(-1, 1, 30)
    with pytest.raises(ValueError, match=r"X has values past float32's range .*standardize=True"):
        gprl.SymbolicRegressor(**TINY).fit(X * 1e39, y)
    est = gprl.SymbolicRegressor(standardize=True, **TINY).fit(X * 1e39, y)  # z-scores are in range
    assert np.isfinite(est.predict(X * 1e39)).all()
    with pytest.raises(ValueError, match=r"X has values past float32's range"):
        est.predict(X * 1e80)
    with pytest.raises(ValueError, match=r"^y has values past float32's range"):
        gprl.RegressionObjective(X, y * 1e39)
    # only the weights' ratios matter, so huge weights are fine
    heavy = gprl.SymbolicRegressor(**TINY).fit(X, y, sample_weight=np.full(30, 1e39))
    np.testing.assert_array_equal(heavy.predict(X), gprl.SymbolicRegressor(**TINY).fit(X, y).predict(X))


def test_linear_scaling_finds_the_shape_and_folds_a_and_b_into_the_formula():
    rng = np.random.default_rng(3)
    X = rng.uniform(1, 5, (400, 3))
    y = 3.7 * X[:, 0] * X[:, 1] / X[:, 2] + 12.3
    est = gprl.SymbolicRegressor(population_size=1000, generations=20, random_state=0).fit(X, y)
    plain = gprl.SymbolicRegressor(population_size=1000, generations=20, random_state=0,
                                   linear_scaling=False).fit(X, y)
    pred = est.predict(X)
    assert mean_squared_error(y, pred) < 1e-6 * y.var() < mean_squared_error(y, plain.predict(X))
    # the formula is a + b * tree: it reproduces predict, and the reported loss is predict's
    np.testing.assert_allclose(_lambdify(est.sympy(protected=True), ["x0", "x1", "x2"])(X), pred, rtol=1e-6)
    assert est.equations_["loss"][est.best_index_] == pytest.approx(mean_squared_error(y, pred), rel=1e-3,
                                                                    abs=1e-9 * y.var())
    with pytest.raises(ValueError, match="linear_scaling=False or 'auto'"):
        gprl.SymbolicRegressor(metric="mae", linear_scaling=True, **TINY).fit(X, y)
    gprl.SymbolicRegressor(metric="mae", **TINY).fit(X, y)  # "auto": off for mae


def test_simplified_linear_scaling_is_exact_only_within_rounding():
    from gprl.sr.scaling import fit_linear_scaling

    rng = np.random.default_rng(4)
    x = rng.uniform(-2, 2, 500)
    f = torch.from_numpy(np.stack([2 * x, -6 * x, x + 0.05 * rng.normal(size=500)])[:, :, None])
    y = torch.from_numpy(x[:, None] + 1.0)
    a, b = fit_linear_scaling(f, y, simplify=True)
    # 2x and -6x carry y exactly: 1 + x/2 and 1 - x/6 (b an exact fraction); the noisy output keeps its
    # fit up to rounding (at most 6 significant digits dropped)
    np.testing.assert_array_equal(b[:2, 0].numpy(), [0.5, float(np.float64(-1) / 6)])
    np.testing.assert_array_equal(a[:2, 0].numpy(), [1.0, 1.0])
    fit_a, fit_b = fit_linear_scaling(f, y)
    np.testing.assert_allclose([a[2, 0], b[2, 0]], [fit_a[2, 0], fit_b[2, 0]], rtol=1e-6)
    assert abs(float(b[2, 0]) - 1) > 1e-3
