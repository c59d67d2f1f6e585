"""Benchmark and user datasets for symbolic regression and classification, as one dataclass.

    data = gprl.datasets.load("nguyen_3")          # or "feynman_I_9_18", "wine", "koza_quartic", ...
    model = gprl.SymbolicRegressor().fit(data.X_train, data.y_train)
    model.score(data.X_test, data.y_test)

Synthetic benchmarks follow their papers' sampling: ``U[a, b, n]`` is n uniform random points in [a, b]
per variable, ``E[a, b, step]`` an evenly spaced grid (a mesh for two variables). Nguyen (Uy et al. 2011)
and the Koza quartic (Koza 1992) define only a training set; their test sets here are 1,000 fresh points from
the training distribution. Keijzer (Keijzer 2003) and Pagie-1 (Pagie & Hogeweg 1997) sets follow McDermott
et al. 2012 ("Genetic programming needs better benchmarks"). Feynman equations follow ``gprl.feynman``.
``sample(name, n)`` draws n random rows of any of these generated benchmarks from the intervals of
``ranges(name)`` (SRBench-style sets of a chosen size).
The scikit-learn datasets (diabetes, wine, breast_cancer, iris, digits) are split into train/test at random
(stratified for classification). ``load_csv``/``from_arrays`` bring the user's own data into the same form.
Nothing is ever dropped silently: NaN/inf or non-numeric features raise a ValueError naming the column.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import sympy

from gprl.sr import feynman

TASKS = ("regression", "classification")
ARITHMETIC = ("add", "sub", "mul", "div")
NGUYEN_FUNCTIONS = ("add", "sub", "mul", "div", "sin", "cos", "exp", "log")
KEIJZER_FUNCTIONS = ("add", "mul", "inv", "neg", "sqrt")


@dataclass
class SupervisedData:
    """A train/test split of one supervised problem.

    ``X_*`` are float64 ``[n, n_features]``; ``y_*`` are float64 ``[n]`` (or ``[n, n_targets]``) for
    regression and the original labels ``[n]`` for classification. ``formula`` is the ground truth over
    ``feature_names`` (a sympy string) when known; ``functions`` and ``constants`` are the benchmark's own
    function set and whether its terminal set has constants (None/True when it defines none).
    """

    name: str
    task: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    feature_names: list[str]
    target_names: list[str] = field(default_factory=lambda: ["y"])
    formula: str | None = None
    functions: tuple[str, ...] | None = None
    constants: bool = True
    description: str = ""

    @property
    def n_features(self) -> int:
        return self.X_train.shape[1]

    @property
    def classes(self) -> np.ndarray:
        if self.task != "classification":
            raise ValueError(f"dataset {self.name!r} is a regression task; it has no classes")
        return np.unique(np.concatenate([self.y_train, self.y_test]))

    def expression(self) -> sympy.Expr | None:
        """The ground-truth formula as sympy (real symbols named like the features), or None."""
        if self.formula is None:
            return None
        symbols = {n: sympy.Symbol(n, real=True) for n in self.feature_names}
        return sympy.sympify(self.formula, locals=symbols)


# ---- synthetic benchmarks ----
@dataclass(frozen=True)
class _Synthetic:
    formula: str  # over x0, x1
    n_vars: int
    train: tuple  # ("U", low, high, n) or ("E", low, high, step)
    test: tuple
    functions: tuple[str, ...] | None
    constants: bool
    description: str
    numeric: Callable | None = None  # for formulas lambdify cannot evaluate (Keijzer-6's harmonic sum)
    integer: bool = False  # defined on integer inputs only (Keijzer-6): ``sample`` draws integers


def _harmonic(x: np.ndarray) -> np.ndarray:
    n = np.floor(x).astype(np.int64)
    table = np.concatenate([[0.0], np.cumsum(1.0 / np.arange(1, max(int(n.max()), 1) + 1))])
    return table[np.clip(n, 0, None)]


_U11_20 = ("U", -1.0, 1.0, 20)
_TEST_1000 = ("U", -1.0, 1.0, 1000)
_K11 = ("U", -3.0, 3.0, 20), ("E", -3.0, 3.0, 0.01)
SYNTHETIC: dict[str, _Synthetic] = {
    "koza_quartic": _Synthetic("x0**4 + x0**3 + x0**2 + x0", 1, _U11_20, _TEST_1000, ARITHMETIC, False,
                               "Koza's quartic polynomial"),
    "pagie_1": _Synthetic("1/(1 + x0**-4) + 1/(1 + x1**-4)", 2, ("E", -5.0, 5.0, 0.4), ("E", -5.0, 5.0, 0.1),
                          ("add", "sub", "mul", "div", "sin", "cos", "exp", "log"), True, "Pagie-1"),
}
_NGUYEN = {
    1: ("x0**3 + x0**2 + x0", 1, _U11_20),
    2: ("x0**4 + x0**3 + x0**2 + x0", 1, _U11_20),
    3: ("x0**5 + x0**4 + x0**3 + x0**2 + x0", 1, _U11_20),
    4: ("x0**6 + x0**5 + x0**4 + x0**3 + x0**2 + x0", 1, _U11_20),
    5: ("sin(x0**2)*cos(x0) - 1", 1, _U11_20),
    6: ("sin(x0) + sin(x0 + x0**2)", 1, _U11_20),
    7: ("log(x0 + 1) + log(x0**2 + 1)", 1, ("U", 0.0, 2.0, 20)),
    8: ("sqrt(x0)", 1, ("U", 0.0, 4.0, 20)),
    9: ("sin(x0) + sin(x1**2)", 2, ("U", -1.0, 1.0, 100)),
    10: ("2*sin(x0)*cos(x1)", 2, ("U", -1.0, 1.0, 100)),
    11: ("x0**x1", 2, ("U", 0.0, 1.0, 100)),
    12: ("x0**4 - x0**3 + x1**2/2 - x1", 2, _U11_20),
}
for _k, (_f, _n, _tr) in _NGUYEN.items():
    SYNTHETIC[f"nguyen_{_k}"] = _Synthetic(_f, _n, _tr, _tr[:3] + (1000,), NGUYEN_FUNCTIONS, False,
                                           f"Nguyen-{_k}")
_KEIJZER = {
    1: ("0.3*x0*sin(2*pi*x0)", 1, ("E", -1.0, 1.0, 0.1), ("E", -1.0, 1.0, 0.001)),
    2: ("0.3*x0*sin(2*pi*x0)", 1, ("E", -2.0, 2.0, 0.1), ("E", -2.0, 2.0, 0.001)),
    3: ("0.3*x0*sin(2*pi*x0)", 1, ("E", -3.0, 3.0, 0.1), ("E", -3.0, 3.0, 0.001)),
    4: ("x0**3*exp(-x0)*cos(x0)*sin(x0)*(sin(x0)**2*cos(x0) - 1)", 1, ("E", 0.0, 10.0, 0.05),
        ("E", 0.05, 10.05, 0.05)),
    5: ("30*x0*x2/((x0 - 10)*x1**2)", 3, ("K5", 1000), ("K5", 10000)),
    6: ("harmonic(x0)", 1, ("E", 1.0, 50.0, 1.0), ("E", 1.0, 120.0, 1.0)),
    7: ("log(x0)", 1, ("E", 1.0, 100.0, 1.0), ("E", 1.0, 100.0, 0.1)),
    8: ("sqrt(x0)", 1, ("E", 0.0, 100.0, 1.0), ("E", 0.0, 100.0, 0.1)),
    9: ("asinh(x0)", 1, ("E", 0.0, 100.0, 1.0), ("E", 0.0, 100.0, 0.1)),
    10: ("x0**x1", 2, ("U", 0.0, 1.0, 100), ("E", 0.0, 1.0, 0.01)),
    11: ("x0*x1 + sin((x0 - 1)*(x1 - 1))", 2, *_K11),
    12: ("x0**4 - x0**3 + x1**2/2 - x1", 2, *_K11),
    13: ("6*sin(x0)*cos(x1)", 2, *_K11),
    14: ("8/(2 + x0**2 + x1**2)", 2, *_K11),
    15: ("x0**3/5 + x1**3/2 - x1 - x0", 2, *_K11),
}
for _k, (_f, _n, _tr, _te) in _KEIJZER.items():
    SYNTHETIC[f"keijzer_{_k}"] = _Synthetic(_f, _n, _tr, _te, KEIJZER_FUNCTIONS, True, f"Keijzer-{_k}",
                                            numeric=(lambda x0: _harmonic(x0)) if _k == 6 else None,
                                            integer=_k == 6)

SKLEARN = {"diabetes": "regression", "wine": "classification", "breast_cancer": "classification",
           "iris": "classification", "digits": "classification"}


def _sample(spec: tuple, n_vars: int, rng: np.random.Generator) -> np.ndarray:
    if spec[0] == "U":
        _, lo, hi, n = spec
        return rng.uniform(lo, hi, (n, n_vars))
    if spec[0] == "K5":  # Keijzer-5: x, z ~ U[-1, 1], y ~ U[1, 2]
        n = spec[1]
        return np.stack([rng.uniform(-1, 1, n), rng.uniform(1, 2, n), rng.uniform(-1, 1, n)], axis=1)
    _, lo, hi, step = spec
    axis = lo + step * np.arange(round((hi - lo) / step) + 1)
    grids = np.meshgrid(*([axis] * n_vars), indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1)


def _spec_ranges(spec: tuple, n_vars: int) -> list[tuple[float, float]]:
    if spec[0] == "K5":
        return [(-1.0, 1.0), (1.0, 2.0), (-1.0, 1.0)]
    return [(float(spec[1]), float(spec[2]))] * n_vars


def _synthetic_targets(s: _Synthetic, X: np.ndarray) -> np.ndarray:
    names = [f"x{k}" for k in range(s.n_vars)]
    symbols = [sympy.Symbol(n, real=True) for n in names]
    fn = s.numeric or sympy.lambdify(symbols, sympy.sympify(s.formula, locals=dict(zip(names, symbols))),
                                     modules="numpy")
    with np.errstate(divide="ignore"):  # Pagie-1 at 0: 1/(1 + inf) = 0, the formula's limit
        return np.broadcast_to(np.asarray(fn(*X.T), dtype=np.float64), (len(X),)).copy()


def _synthetic(name: str, seed: int, noise: float) -> SupervisedData:
    s = SYNTHETIC[name]
    rng = np.random.default_rng(seed)
    names = [f"x{k}" for k in range(s.n_vars)]
    parts = []
    for spec in (s.train, s.test):
        X = _sample(spec, s.n_vars, rng)
        parts += [X, _synthetic_targets(s, X)]
    if noise:
        parts[1] = parts[1] + rng.normal(0.0, noise * np.std(parts[1]), parts[1].shape)
    return SupervisedData(name, "regression", *parts, feature_names=names, formula=s.formula,
                          functions=s.functions, constants=s.constants, description=s.description)


def _feynman(name: str, n_samples: int, test_size: float, seed: int, noise: float) -> SupervisedData:
    eq = feynman.BY_KEY[name]
    X, y = eq.sample(n_samples, np.random.default_rng(seed))
    if noise:
        y = y + np.random.default_rng(seed + 1).normal(0.0, noise * np.std(y), y.shape)
    return from_arrays(X, y, feature_names=[v for v, _, _ in eq.variables], target_names=[eq.output],
                       test_size=test_size, seed=seed, name=name, formula=eq.formula,
                       description=f"Feynman {eq.name}: {eq.output} = {eq.formula}")


def _sklearn(name: str, test_size: float, seed: int) -> SupervisedData:
    from sklearn import datasets as skd

    bunch = getattr(skd, f"load_{name}")()
    task = SKLEARN[name]
    y = bunch.target.astype(np.float64) if task == "regression" else bunch.target
    targets = ["target"] if task == "regression" else [str(t) for t in bunch.target_names]
    return from_arrays(bunch.data, y, feature_names=[str(f) for f in bunch.feature_names],
                       target_names=targets, task=task, test_size=test_size, seed=seed, name=name,
                       description=f"scikit-learn's bundled {name} dataset")


def ranges(name: str) -> list[tuple[float, float]]:
    """The interval each variable of a Feynman or synthetic benchmark is drawn from (for the synthetic
    ones, their training set's: a grid's span, or Keijzer-5's three intervals), in feature order."""
    key = _generated_key(name)
    if key in feynman.BY_KEY:
        return [(float(lo), float(hi)) for _, lo, hi in feynman.BY_KEY[key].variables]
    s = SYNTHETIC[key]
    return _spec_ranges(s.train, s.n_vars)


def sample(name: str, n_samples: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, list[str], str]:
    """``n_samples`` noise-free rows of a Feynman or synthetic benchmark, each variable drawn independently
    and uniformly from its interval of ``ranges(name)`` (integers for Keijzer-6, a sum over integers):
    ``(X [n, d], y [n], feature_names, formula)``, float64. Unlike ``load``, the synthetic benchmarks get
    ``n_samples`` random rows here instead of their papers' sets (e.g. for SRBench's 10,000-row protocol)."""
    key = _generated_key(name)
    _check_int("n_samples", n_samples, 1)
    rng = np.random.default_rng(seed)
    if key in feynman.BY_KEY:
        eq = feynman.BY_KEY[key]
        X, y = eq.sample(n_samples, rng)
        return X, y, [v for v, _, _ in eq.variables], eq.formula
    s = SYNTHETIC[key]
    lo_hi = _spec_ranges(s.train, s.n_vars)
    if s.integer:
        X = np.stack([rng.integers(round(lo), round(hi), n_samples, endpoint=True) for lo, hi in lo_hi],
                     axis=1).astype(np.float64)
    else:
        X = np.stack([rng.uniform(lo, hi, n_samples) for lo, hi in lo_hi], axis=1)
    return X, _synthetic_targets(s, X), [f"x{k}" for k in range(s.n_vars)], s.formula


def _generated_key(name: str) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be a dataset name (str), got {type(name).__name__}")
    key = name.replace(".", "_")
    if key not in feynman.BY_KEY and key not in SYNTHETIC:
        raise ValueError(f"unknown generated benchmark {name!r}; choose a Feynman or synthetic one "
                         f"(e.g. 'feynman_I_9_18', 'nguyen_1', 'keijzer_4')")
    return key


def names() -> list[str]:
    """Every name ``load`` accepts."""
    return [*SYNTHETIC, *feynman.BY_KEY, *SKLEARN]


def load(name: str, *, n_samples: int = 10_000, test_size: float = 0.25, seed: int = 0,
         noise: float = 0.0) -> SupervisedData:
    """A named dataset (see ``names()``) as a :class:`SupervisedData` train/test split.

    ``n_samples`` (rows generated) and ``test_size`` apply to the Feynman equations and the scikit-learn
    sets (``test_size`` only); the synthetic benchmarks use their papers' sizes. ``noise`` adds Gaussian noise
    of ``noise * std(y)`` to regression targets (training targets only for the synthetic benchmarks).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a dataset name (str), got {type(name).__name__}")
    key = name.replace(".", "_")
    if key in SYNTHETIC:
        return _synthetic(key, seed, noise)
    if key in feynman.BY_KEY:
        _check_int("n_samples", n_samples, 2)
        return _feynman(key, n_samples, test_size, seed, noise)
    if key in SKLEARN:
        if noise:
            raise ValueError("noise applies to generated regression data, not to scikit-learn's datasets")
        return _sklearn(key, test_size, seed)
    raise ValueError(f"unknown dataset {name!r}; choose one of gprl.datasets.names() (e.g. 'nguyen_1', "
                     f"'feynman_I_9_18', 'wine') or load your own with load_csv/from_arrays")


# ---- the user's own data ----
def check_features(X, name: str = "X", feature_names: Sequence[str] | None = None) -> np.ndarray:
    """X as a finite float64 [n, d] array; a clear ValueError for non-numeric columns, NaN/inf or no rows."""
    try:
        import pandas as pd
    except ImportError:  # pandas is optional for array inputs
        pd = None
    if pd is not None and isinstance(X, pd.DataFrame):
        bad = [str(c) for c in X.columns if not (pd.api.types.is_numeric_dtype(X[c]) or
                                                 pd.api.types.is_bool_dtype(X[c]))]
        if bad:
            raise ValueError(f"{name} has non-numeric columns {bad}; encode them as numbers (e.g. one-hot) "
                             f"or leave them out")
        feature_names = [str(c) for c in X.columns]
        X = X.to_numpy()
    if hasattr(X, "toarray") or type(X).__module__.startswith("scipy.sparse"):
        raise TypeError(f"Sparse data was passed for {name}, but dense data is required; convert it with "
                        f"{name}.toarray()")
    X = np.asarray(X)
    if X.dtype == object:  # numbers stored as objects are fine; strings are not
        try:
            X = X.astype(np.float64)
        except TypeError as err:  # e.g. a dict or list in a cell
            raise TypeError(f"{name} has non-numeric values ({err}); encode them as numbers first") from err
        except ValueError as err:  # e.g. a string that is not a number
            raise ValueError(f"{name} has non-numeric values ({err}); encode them as numbers first") from err
    if np.iscomplexobj(X):
        raise ValueError(f"Complex data not supported: {name} holds complex numbers; split them into real "
                         f"and imaginary features")
    if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise ValueError(f"{name} must be numeric, got dtype {X.dtype}; "
                         "convert strings/categories to numbers")
    if X.ndim == 1:
        raise ValueError(f"{name} must be 2-D [n_samples, n_features], got 1-D. Reshape your data with "
                         f"X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a single sample")
    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D [n_samples, n_features], got shape {X.shape}")
    if X.shape[0] == 0:
        raise ValueError(f"{name} is empty: found array with 0 sample(s) (shape={X.shape}) while a minimum "
                         f"of 1 is required.")
    if X.shape[1] == 0:
        raise ValueError(f"{name} has 0 feature(s) (shape={X.shape}) while a minimum of 1 is required.")
    X = X.astype(np.float64)
    finite = np.isfinite(X)
    if not finite.all():
        cols = np.nonzero(~finite.all(axis=0))[0]
        where = [feature_names[c] for c in cols] if feature_names is not None else [int(c) for c in cols]
        raise ValueError(f"{name} contains NaN or inf ({int((~finite).sum())} values, "
                         f"in columns {where[:10]}); "
                         f"impute or remove those rows yourself: nothing is dropped silently")
    return X


def check_targets(y, n_rows: int, task: str, name: str = "y") -> np.ndarray:
    """y as float64 [n] / [n, k] (regression) or labels [n] (classification), with clear errors."""
    if y is None:
        raise ValueError(f"this estimator requires y to be passed, but the target {name} is None")
    y = y.to_numpy() if hasattr(y, "to_numpy") else np.asarray(y)
    if y.ndim == 0:
        raise ValueError(f"{name} must be an array of targets, got a scalar")
    if y.shape[0] != n_rows:
        raise ValueError(f"X and {name} have different numbers of rows ({n_rows} vs {y.shape[0]}); "
                         f"they must match")
    if n_rows == 0:
        raise ValueError(f"{name} is empty; it needs at least one row")
    if task == "regression":
        if y.ndim > 2:
            raise ValueError(f"{name} must be [n] or [n, n_targets], got shape {y.shape}")
        if y.dtype == object:  # numbers stored as objects are fine; labels are not
            try:
                y = y.astype(np.float64)
            except (TypeError, ValueError) as err:
                raise ValueError(f"{name} must be numeric for regression ({err}); for class labels use "
                                 f"SymbolicClassifier") from err
        if not (np.issubdtype(y.dtype, np.number) or y.dtype == bool) or np.iscomplexobj(y):
            raise ValueError(f"{name} must be numeric for regression, got dtype {y.dtype}; for labels use "
                             f"SymbolicClassifier")
        y = y.astype(np.float64)
        if not np.isfinite(y).all():
            raise ValueError(f"{name} contains NaN or inf ({int((~np.isfinite(y)).sum())} values); remove or "
                             f"impute them: nothing is dropped silently")
        return y
    if y.ndim == 2 and y.shape[1] == 1:
        import warnings

        from sklearn.exceptions import DataConversionWarning

        warnings.warn("A column-vector y was passed when a 1d array was expected; it is used as 1-D labels "
                      "[n] (use y.ravel())",
                      DataConversionWarning, stacklevel=3)
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D class labels for classification, got shape {y.shape}")
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        raise ValueError(f"{name} contains NaN or inf labels; every row needs a class")
    if y.dtype == object and any(v is None or (isinstance(v, float) and not np.isfinite(v)) for v in y):
        raise ValueError(f"{name} contains missing labels (None/NaN); every row needs a class")
    return y


def from_arrays(X, y, *, feature_names: Sequence[str] | None = None,
                target_names: Sequence[str] | None = None,
                task: str = "regression", test_size: float = 0.25, seed: int = 0, name: str = "arrays",
                formula: str | None = None, description: str = "") -> SupervisedData:
    """The user's arrays (NumPy or pandas) validated and split into train/test (stratified for
    classification; ``test_size=0`` keeps every row for training and leaves the test set empty)."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if feature_names is None and hasattr(X, "columns"):
        feature_names = [str(c) for c in X.columns]
    X = check_features(X, "X", feature_names)
    y = check_targets(y, X.shape[0], task)
    feature_names = [f"x{k}" for k in range(X.shape[1])] if feature_names is None else [str(f) for f in
                                                                                          feature_names]
    if len(feature_names) != X.shape[1]:
        raise ValueError(f"feature_names holds {len(feature_names)} names but X has {X.shape[1]} columns")
    if not (isinstance(test_size, (int, float)) and 0 <= test_size < 1):
        raise ValueError(f"test_size must be a fraction in [0, 1), got {test_size!r}")
    if task == "classification" and len(np.unique(y)) < 2:
        raise ValueError(f"y holds only one class ({np.unique(y)[0]!r}); classification needs at least two")
    if test_size == 0:
        split = X, X[:0], y, y[:0]
    else:
        from sklearn.model_selection import train_test_split

        split = train_test_split(X, y, test_size=test_size, random_state=seed,
                                 stratify=y if task == "classification" else None)
    X_train, X_test, y_train, y_test = split
    if target_names is None:
        target_names = ([str(c) for c in np.unique(y)] if task == "classification" else
                        ["y"] if y.ndim == 1 else [f"y{k}" for k in range(y.shape[1])])
    return SupervisedData(name, task, X_train, y_train, X_test, y_test, feature_names=list(feature_names),
                          target_names=list(target_names), formula=formula, description=description)


def load_csv(path: str | os.PathLike, target: str | int | Sequence[str | int], *,
             features: Sequence[str | int] | None = None, task: str = "regression", test_size: float = 0.25,
             seed: int = 0, **read_csv_kwargs) -> SupervisedData:
    """A CSV file (or .npy/.npz array, target/features as column indices) as a train/test split.

    ``target`` names the target column(s) (names or indices); ``features`` the input columns (default: every
    other column). Extra keyword arguments go to ``pandas.read_csv``.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"path {path!r} does not exist")
    import pandas as pd

    if path.endswith((".npy", ".npz")):
        arr = np.load(path)
        if isinstance(arr, np.lib.npyio.NpzFile):
            arr = arr[arr.files[0]]
        frame = pd.DataFrame(np.asarray(arr))
    else:
        frame = pd.read_csv(path, **read_csv_kwargs)
    if frame.shape[0] == 0:
        raise ValueError(f"{path} holds no data rows")
    targets = [target] if isinstance(target, (str, int)) else list(target)
    cols = list(frame.columns)

    def column(c):
        if c in cols:
            return c
        if isinstance(c, int) and -len(cols) <= c < len(cols):
            return cols[c]
        raise ValueError(f"column {c!r} is not in {path}; its columns are {cols}")

    targets = [column(c) for c in targets]
    features = [c for c in cols if c not in targets] if features is None else [column(c) for c in features]
    if not features:
        raise ValueError("features is empty: choose at least one input column")
    y = frame[targets[0]] if len(targets) == 1 else frame[targets]
    return from_arrays(frame[features], y, feature_names=[str(f) for f in features],
                       target_names=None if task == "classification" else [str(t) for t in targets],
                       task=task, test_size=test_size, seed=seed, name=os.path.basename(path))


def _check_int(name: str, v, low: int) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")
