"""scikit-learn estimators: ``SymbolicRegressor`` and ``SymbolicClassifier``.

    model = gprl.SymbolicRegressor(generations=100, random_state=0).fit(X, y)
    model.sympy(), model.latex(), model.equations_      # the Pareto front: complexity, loss, score, equation
    model.predict(X)

Both evolve a population with :class:`gprl.GeneticProgramming` against an objective of ``gprl.objectives``
entirely on the device (``device="auto"``: CUDA when available), keep the best tree of every length (the
Pareto archive), and pick the final model from that front by ``model_selection``:

* ``"accuracy"``: the lowest loss;
* ``"best"`` (PySR's rule): among the equations with loss <= 1.5 x the lowest, the highest *score*, where
  score is the drop in log-loss per unit of complexity from the next simpler equation on the front;
* ``"simplest"``: the simplest equation whose loss is within ``SIMPLEST_TOLERANCE`` (1%) of the lowest,
  plus 1e-12 x the loss of the target's mean alone (so formulas exact up to rounding count as equal).

Complexity is the number of tree nodes. With ``validation_fraction`` the front's losses (and the choice) are
measured on held-out training rows. ``standardize=True`` evolves on z-scored features and folds the scaling
into the exported formulas, so formulas always read in the raw units of ``X``. Multi-target ``y`` is fitted
by multi-output trees (Modi nodes), one output per target; classifiers use one output per class (softmax) or
a single output with a sigmoid for two classes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
import sympy
import torch

try:
    from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
    from sklearn.utils.validation import check_is_fitted
except ImportError as err:  # an optional extra
    raise ImportError("gprl's SymbolicRegressor/SymbolicClassifier need scikit-learn and pandas: "
                      "pip install 'gprl[sr]'") from err
try:
    from sklearn.utils.validation import _check_feature_names, _check_n_features
except ImportError:  # scikit-learn < 1.6 has them as BaseEstimator methods
    def _check_feature_names(estimator, X, *, reset):
        estimator._check_feature_names(X, reset=reset)

    def _check_n_features(estimator, X, reset):
        estimator._check_n_features(X, reset=reset)

from gprl.core.dataset import check_float32_range
from gprl.core.population import Population, unprotect
from gprl.core.seeds import mix_seed
from gprl.evolve.algorithm import GeneticProgramming
from gprl.evolve.config import GPConfig
from gprl.evolve.constants import ConstantFitting, tune_best
from gprl.evolve.loop import Evolution, Generation
from gprl.sr.datasets import check_features, check_targets
from gprl.sr.export import exact_number, probabilities
from gprl.sr.objectives import ClassificationObjective, RegressionObjective

MODEL_SELECTIONS = ("best", "accuracy", "simplest")
SIMPLEST_TOLERANCE = 0.01
# a target whose largest magnitude is outside this range is standardised for the search: its squared errors
# would overflow (or underflow) the kernels' float32 losses; inside it, the search sees y as given
TARGET_RANGE = (1e-12, 1e12)
AUTO_POPULATION_CPU, AUTO_POPULATION_PER_SM = 2000, 400
AUTO_VALIDATION = (1000, 0.2)  # validation_fraction="auto": 20% of the rows from 1,000 rows on
FINISH_SHARE = 0.03  # of time_limit, kept for choosing the model after the search (first calls: _rehearse)


def auto_population(device: torch.device) -> int:
    """``population_size="auto"``: ``AUTO_POPULATION_CPU`` trees on the CPU, ``AUTO_POPULATION_PER_SM`` per
    streaming multiprocessor on a GPU."""
    if device.type != "cuda":
        return AUTO_POPULATION_CPU
    return AUTO_POPULATION_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count


def resolve_device(device) -> torch.device:
    """``"auto"``: the current CUDA device when available, else the CPU."""
    if device is None or device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available; use device='auto' or 'cpu'")
    return dev


def pareto_scores(complexity: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """PySR's score: -d log(loss) / d complexity against the previous (simpler) equation; 0 for the first."""
    logl = np.log(np.maximum(np.asarray(loss, dtype=np.float64), np.finfo(np.float64).tiny))
    score = np.zeros(len(loss))
    score[1:] = -np.diff(logl) / np.maximum(np.diff(np.asarray(complexity, dtype=np.float64)), 1.0)
    return score


def select_model(complexity: np.ndarray, loss: np.ndarray, rule: str, flat_loss: float = 0.0) -> int:
    """Index of the chosen equation on a front sorted by complexity (see the module docstring);
    ``flat_loss``: the loss of the target's mean alone (``"simplest"``'s rounding floor)."""
    loss = np.asarray(loss, dtype=np.float64)
    finite = np.isfinite(loss)
    if not finite.any():
        return 0
    best = float(np.min(loss[finite]))
    if rule == "accuracy":
        return int(np.flatnonzero(loss == best)[0])
    if rule == "simplest":
        return int(np.flatnonzero(finite & (loss <= best * (1 + SIMPLEST_TOLERANCE) + 1e-12 * flat_loss))[0])
    score = pareto_scores(complexity, loss)
    candidates = np.flatnonzero(finite & (loss <= 1.5 * best))
    return int(candidates[np.argmax(score[candidates])])


def weighted_mean_std(a: np.ndarray, weight: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Column means and (population) standard deviations of ``a [n, d]``, weighted by ``weight [n]``:
    integer weights give the statistics of repeated rows, zero weights those of absent rows."""
    if weight is None:
        return a.mean(axis=0), a.std(axis=0)
    keep = weight > 0  # a zero-weighted huge value would still give 0 * inf = nan
    a, weight = a[keep], weight[keep]
    mean = np.average(a, axis=0, weights=weight)
    return mean, np.sqrt(np.average((a - mean) ** 2, axis=0, weights=weight))


def target_scaling(y: np.ndarray, weight: np.ndarray | None) -> tuple[float, np.ndarray, float] | None:
    """None when the largest ``|y|`` (over rows of positive weight) is 0 or inside ``TARGET_RANGE``, else
    ``(size, mean, sd)`` such that ``(y / size - mean) / sd`` standardises y: ``mean`` the weighted mean of
    each target, ``sd`` the largest weighted standard deviation. One ``sd`` for every target keeps the loss
    (a mean over targets) the same up to a factor; dividing by ``size`` first keeps the statistics finite."""
    keep = slice(None) if weight is None else weight > 0
    size = float(np.abs(y[keep]).max())
    if size == 0 or TARGET_RANGE[0] <= size <= TARGET_RANGE[1]:
        return None
    y, weight = (y / size).reshape(len(y), -1)[keep], None if weight is None else weight[keep]
    mean, sd = weighted_mean_std(y, weight)
    return size, mean, float(sd.max()) or 1.0


def as_float32(a: np.ndarray, name: str, fix: str) -> np.ndarray:
    """``a`` in the kernels' float32, or a ValueError naming ``name`` and ``fix`` where a value is past its
    range."""
    check_float32_range(a, name, fix)
    return a.astype(np.float32)


class _SymbolicBase(BaseEstimator):
    """Shared fitting machinery; the subclasses define the parameters (sklearn reads them from __init__)."""

    _task = "regression"

    # ---- validation ----
    def _validate_params(self) -> None:
        v = self.generations
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"generations must be an integer >= 1, got {v!r}")
        if self.model_selection not in MODEL_SELECTIONS:
            raise ValueError(f"model_selection must be one of {MODEL_SELECTIONS}, "
                             f"got {self.model_selection!r}")
        v = self.validation_fraction
        if v is not None and v != "auto" and not (0 < float(v) < 1):
            raise ValueError(f"validation_fraction must be None, 'auto' or in (0, 1), got {v!r}")
        v = self.population_size
        if v != "auto" and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 2):
            raise ValueError(f"population_size must be 'auto' or an integer >= 2, got {v!r}")
        if self.time_limit is not None and not float(self.time_limit) > 0:
            raise ValueError(f"time_limit must be None or seconds > 0, got {self.time_limit!r}")
        if self.target_loss is not None and not np.isfinite(float(self.target_loss)):
            raise ValueError(f"target_loss must be None or a finite number, got {self.target_loss!r}")
        for name, low in (("optimize_constants", 0), ("optimize_every", 1), ("optimizer_iterations", 1),
                          ("ensemble_size", 1)):
            v = getattr(self, name, low)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {v!r}")

    def _gp_config(self, device: torch.device) -> GPConfig:
        """The search settings among the estimator's parameters (``"auto"`` sizes for ``device``)."""
        return GPConfig(population_size=auto_population(device) if self.population_size == "auto"
                        else self.population_size, max_len=self.max_len,
                        functions=self.functions, init_depth=self.init_depth, max_depth=self.max_depth,
                        tournament_size=self.tournament_size,
                        elitism=self.elitism, parsimony=float(self.parsimony), rates=self.rates,
                        const_prob=self.const_prob, const_range=self.const_range)

    def _check_X(self, X, fitting: bool) -> np.ndarray:
        """X as float64 [n, d]; names and counts set at fit and compared later, as scikit-learn does (a
        ValueError for unseen, missing or reordered names, a warning when only one side has names)."""
        _check_feature_names(self, X, reset=fitting)  # before the conversion drops a DataFrame's columns
        names = [str(c) for c in X.columns] if hasattr(X, "columns") else None
        X = check_features(X, "X", names)
        _check_n_features(self, X, reset=fitting)
        return X

    def _check_weight(self, sample_weight, n: int) -> np.ndarray | None:
        if sample_weight is None:
            return None
        w = np.asarray(sample_weight, dtype=np.float64)
        if w.shape != (n,):
            raise ValueError(f"sample_weight must have shape ({n},) like X's rows, got {w.shape}")
        if not np.isfinite(w).all() or (w < 0).any():
            raise ValueError("sample_weight must be finite and >= 0")
        if not w.sum() > 0:
            raise ValueError("sample_weight is all zero; give at least one row a positive weight")
        # only ratios matter: a power of two brings any size into float32's range without rounding
        return np.ldexp(w, -np.frexp(w.max())[1])

    def _names(self) -> list[str]:
        if hasattr(self, "feature_names_in_"):
            return [str(n) for n in self.feature_names_in_]
        return [f"x{k}" for k in range(self.n_features_in_)]

    def _transform(self, X: np.ndarray) -> np.ndarray:
        """The search's float32 inputs for raw X."""
        fix = "rescale X" if self.standardize else "rescale X or use standardize=True"
        return as_float32((X - self._mean) / self._scale, "X", fix)

    # ---- the search ----
    def _fit(self, X: np.ndarray, targets: np.ndarray, weight: np.ndarray | None, make_objective: Callable,
             started: float):
        """Evolves on (X, targets); ``make_objective(X, targets, weight)`` builds an objective for a row
        subset. ``started``: ``time.perf_counter()`` when ``fit`` was called (``time_limit`` counts from
        there)."""
        self._validate_params()
        device = resolve_device(self.device)
        config = self._gp_config(device)  # checked before any work on the data
        seed = int(np.random.RandomState(self.random_state).randint(0, 2**31 - 1)) \
            if not isinstance(self.random_state, (int, np.integer)) else int(self.random_state)
        n = X.shape[0]
        rows = np.arange(n)
        val_rows = None
        fraction = self.validation_fraction
        if fraction == "auto":  # held-out rows choose the model where there are enough to spare
            fraction = AUTO_VALIDATION[1] if n >= AUTO_VALIDATION[0] else None
        if fraction is not None:
            perm = np.random.default_rng(seed).permutation(n)
            n_val = round(float(fraction) * n)
            if n_val < 1 or n - n_val < 1:
                raise ValueError(f"validation_fraction={fraction} leaves no rows for "
                                 f"training or validation with {n} samples; use None or another fraction")
            val_rows, rows = np.sort(perm[:n_val]), np.sort(perm[n_val:])
        if self.standardize:
            self._mean, sd = weighted_mean_std(X[rows], None if weight is None else weight[rows])
            self._scale = np.where(sd > 0, sd, 1.0)
        else:
            self._mean, self._scale = np.zeros(X.shape[1]), np.ones(X.shape[1])
        Xs = self._transform(X)
        sub = (lambda a, r: None if a is None else a[r])
        self._y_shift = self._y_scale = None
        factor = 1.0  # the search's losses times this are losses in y's units
        scaling = target_scaling(targets[rows], sub(weight, rows)) if self._task == "regression" else None
        if scaling is not None:
            size, mean, sd = scaling
            targets = ((targets / size).reshape(n, -1) - mean).reshape(targets.shape) / sd
            self._y_shift, self._y_scale = mean * size, sd * size
            factor = self._y_scale ** (2 if self.metric == "mse" else 1)
        train = make_objective(Xs[rows], targets[rows], sub(weight, rows), device)
        n_islands = int(getattr(self, "ensemble_size", 1))
        # independent populations (islands without migration), evaluated together in one objective call;
        # island 0 runs with the estimator's own seed, so ensemble_size=1 is the plain single run
        gps = [GeneticProgramming(train.n_in, train.n_out, config, seed=seed if k == 0 else mix_seed(seed, k),
                                  device=device) for k in range(n_islands)]
        n_tune = int(self.optimize_constants)
        constants = ConstantFitting(train, n_tune, int(self.optimizer_iterations), int(self.optimize_every)) \
            if n_tune else None
        populations = [gp.init() for gp in gps]
        val = None if val_rows is None else make_objective(Xs[val_rows], targets[val_rows],
                                                           sub(weight, val_rows), device)
        limit = None
        if self.time_limit is not None:
            # the end of the fit rehearsed on a front's worth of trees: the one-time costs of its first calls
            # (a CUDA device's calibration of an op, lazy kernel loading) fall inside time_limit here, where
            # the search's share is still to be fixed, instead of overrunning it after the search
            self._rehearse(populations[0], train, val, n_tune)
            # the search gets what the set-up left of time_limit, less a share for choosing the model after it
            limit = max(0.0, (1 - FINISH_SHARE) * float(self.time_limit) - (time.perf_counter() - started))
        search = Evolution(gps, lambda population, generation: (train(population), {}),
                           generations=int(self.generations), time_limit=limit,
                           constants=constants, finish="archive")
        watch = self.target_loss is not None or self.verbose or self.callback is not None
        result = search.run(populations,
                            report=(lambda generation: self._report(generation, factor)) if watch else None)
        self.n_generations_ = result.generation
        self.search_seconds_ = search.elapsed()
        fronts, coefs, complexity, used, trained, island, chosen = [], [], [], [], [], [], []
        for k, gp in enumerate(gps):
            lengths, losses, trees = gp.archive.front()
            if len(lengths) == 0:  # the archive keeps finite losses only
                raise RuntimeError("no tree had a finite loss on the training data; check the scale of X "
                                   "(standardize=True) and the function set")
            if n_tune:  # the front's trees get tuned too: the final model is among them
                trees, losses = tune_best(trees, losses, train, len(trees), int(self.optimizer_iterations))
                gp.archive.update(trees, losses)
                lengths, losses, trees = gp.archive.front()
            coef, train_loss, loss_used = self._front_losses(trees, losses, train, val)
            cx = lengths.cpu().numpy()
            chosen.append(sum(len(f) for f in fronts)
                          + select_model(cx, loss_used, self.model_selection,
                                         (train if val is None else val).flat_loss()))
            fronts.append(trees.to("cpu"))
            coefs.append(None if coef is None else tuple(c.cpu().numpy() for c in coef))
            complexity.append(cx)
            used.append(loss_used)
            trained.append(train_loss)
            island.append(np.full(len(cx), k))
        self._coef = None if coefs[0] is None else tuple(np.concatenate(c) for c in zip(*coefs))
        self._front = Population.cat(fronts)
        used_all = np.concatenate(used)
        self.members_ = np.asarray(chosen)
        # the best single formula of the model (the model itself when ensemble_size is 1)
        self.best_index_ = int(self.members_[np.argmin(used_all[self.members_])])
        self._tree = self._front[self.best_index_]
        # the table (one sympy formula per front tree) is built when first read: outside the time limit
        self._equations = None
        self._table_args = (complexity, used, trained if val_rows is not None else None, island,
                            self.members_, factor)
        self.device_ = str(device)
        self.fit_seconds_ = time.perf_counter() - started
        return self

    def _front_losses(self, trees: Population, losses: torch.Tensor, train, val):
        """The output intercept/slope of each front tree (linear scaling, fitted on the training rows; None
        without), the training loss of exactly that formula, and the loss that chooses the model (the
        validation rows' where held out), both float64 NumPy."""
        if not train.scaling:
            coef = None
        elif self._task == "regression":  # exact where the fit only absorbs rounding
            coef = train.coefficients(trees, simplify=True)
        else:
            coef = train.coefficients(trees)
        train_loss = (losses if coef is None else train(trees, coef)).cpu().numpy().astype(np.float64)
        if val is None:
            return coef, train_loss, train_loss
        return coef, train_loss, (val(trees) if coef is None else val(trees, coef)).cpu().numpy().astype(
            np.float64)

    def _rehearse(self, population: Population, train, val, n_tune: int) -> None:
        """Every call the end of the fit makes (the front's tuning, coefficients and losses), once, on
        ``max_len`` trees of ``population`` (a front's size at most; one tuning step): nothing is kept."""
        trees = population[: min(len(population), int(self.max_len))]
        losses = train(trees)
        if n_tune:
            trees, losses = tune_best(trees, losses, train, len(trees), 1)
        self._front_losses(trees, losses, train, val)
        (train if val is None else val).flat_loss()

    @property
    def equations_(self):
        """The fronts (one per island, shortest first): complexity, loss (train_loss with validation rows),
        score, equation, sympy_format (and island, member for ensembles)."""
        check_is_fitted(self, "_tree")
        if self._equations is None:
            self._equations = self._table(*self._table_args)
        return self._equations

    def _report(self, generation: Generation, factor: float) -> str:
        """Progress of a watched generation (``factor``: the search's losses to y's units); "target_loss"
        once it is reached."""
        g, seconds = generation.number, generation.elapsed_s
        best = float(min(loss.min() for loss in generation.fitness)) * factor  # the one host sync
        if self.verbose:
            print(f"generation {g}: best loss {best:.6g} ({seconds:.1f} s)")
        if self.callback is not None:
            self.callback({"generation": g, "best_loss": best, "seconds": seconds})
        return "target_loss" if self.target_loss is not None and best <= float(self.target_loss) else ""

    def _table(self, complexity, loss, train_loss, island, members, factor):
        """The fronts (one per island, each shortest first) as a DataFrame; inputs are per-island lists of
        the search's losses, reported times ``factor`` (in y's units; the scores do not change)."""
        import pandas as pd

        exprs = [self._expressions(i, protected=False) for i in range(len(self._front))]
        single = self._front.n_out == 1 and self._task == "regression" and not self._multi_target
        cols = {"complexity": np.concatenate(complexity).astype(int), "loss": np.concatenate(loss) * factor,
                "score": np.concatenate([pareto_scores(c, lo) for c, lo in zip(complexity, loss)])}
        if train_loss is not None:
            cols["train_loss"] = np.concatenate(train_loss) * factor
        if len(island) > 1:
            cols["island"] = np.concatenate(island)
            cols["member"] = np.isin(np.arange(len(cols["loss"])), members)
        cols["equation"] = [str(e[0]) if single else "; ".join(map(str, e)) for e in exprs]
        cols["sympy_format"] = [e[0] if single else e for e in exprs]
        return pd.DataFrame(cols)

    def _expressions(self, index: int, protected: bool) -> list[sympy.Expr]:
        """The formulas of front tree ``index`` over the raw feature names (standardisation folded in)."""
        names = self._names()
        exprs = self._front.to_sympy(index, names=names, protected=True)
        if self._coef is not None:
            exprs = [exact_number(a) + exact_number(b) * e
                     for a, b, e in zip(self._coef[0][index], self._coef[1][index], exprs)]
        if getattr(self, "_y_scale", None) is not None:
            exprs = [float(m) + self._y_scale * e for m, e in zip(self._y_shift, exprs)]
        if self.standardize:
            raw = [sympy.Symbol(n, real=True) for n in names]
            sub = {s: (s - float(m)) / float(sc) for s, m, sc in zip(raw, self._mean, self._scale)}
            exprs = [e.xreplace(sub) for e in exprs]
        return exprs if protected else [unprotect(e) for e in exprs]

    def _outputs(self, X) -> np.ndarray:
        """The model's outputs ``[D, n_out]`` for raw X (with its output scaling, if any): the mean over the
        ensemble's members (the one chosen formula when ``ensemble_size`` is 1)."""
        check_is_fitted(self, "_tree")
        X = self._transform(self._check_X(X, fitting=False))
        device = resolve_device(self.device)
        members = self._front[self.members_].to(device)
        # [K, D, n_out]
        out = members.forward(torch.from_numpy(X).to(device)).cpu().numpy().astype(np.float64)
        if self._coef is not None:
            out = self._coef[0][self.members_][:, None] + self._coef[1][self.members_][:, None] * out
        if getattr(self, "_y_scale", None) is not None:
            out = self._y_shift + self._y_scale * out
        return out.mean(axis=0)

    def _model_expressions(self, protected: bool) -> list[sympy.Expr]:
        """The model's formulas: the chosen one, or the mean of the ensemble members' formulas."""
        per = [self._expressions(int(i), protected) for i in self.members_]
        return per[0] if len(per) == 1 else [sympy.Add(*es) / len(per) for es in zip(*per)]

    def _pick(self, index: int | None) -> int:
        check_is_fitted(self, "_tree")
        if index is None:
            return self.best_index_
        if not -len(self._front) <= index < len(self._front):
            raise IndexError(f"index {index} is out of range for equations_ with {len(self._front)} rows")
        return int(index) % len(self._front)

    def sympy(self, index: int | None = None, protected: bool = False):
        """The model's formula (or row ``index`` of ``equations_``) as sympy; a list for several outputs.

        ``protected=True`` gives the exact kernel semantics (lambdify with
        ``modules=[gprl.functions.NUMPY_FUNCTIONS, "numpy"]``), else the plain reading form. With
        ``ensemble_size > 1`` the model's formula is the mean of its members' (``members_``)."""
        if index is None:
            check_is_fitted(self, "_tree")
            exprs = self._model_expressions(protected)
        else:
            exprs = self._expressions(self._pick(index), protected)
        return exprs[0] if len(exprs) == 1 else exprs

    def latex(self, index: int | None = None) -> str | list[str]:
        exprs = self.sympy(index)
        exprs = exprs if isinstance(exprs, list) else [exprs]
        out = [sympy.latex(e) for e in exprs]
        return out[0] if len(out) == 1 else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = self.random_state is None
        return tags


_DOC_PARAMS = """
    population_size, generations: the search budget (trees per generation, generations); "auto": 2,000
    trees on the CPU, 400 per streaming multiprocessor on a GPU (52,800 on an H100).
    functions: the function set (``gprl.functions`` names). const_prob, const_range: constant leaves.
    max_len, max_depth, init_depth: tree size bounds. tournament_size, elitism, rates: the GP's selection,
    elites and operator mix (``gprl.GeneticProgramming``). parsimony: ``parsimony * length`` added to the
    loss seen by selection. metric: the loss. model_selection: "simplest", "best" or "accuracy" (module
    docstring). target_loss: stop early once the best training loss is <= this. time_limit: seconds from
    the call of fit to its return (set-up, kernel warm-up and the model's choice included).
    validation_fraction: rows held out to measure the front and choose the model ("auto": 20% from 1,000
    rows on, else none). standardize: z-score the features (folded into the formulas). random_state: int
    for reproducible runs. device: "auto", "cpu", "cuda", ...
    callback: called each generation with {"generation", "best_loss", "seconds"}. verbose: print progress.
    optimize_constants: every ``optimize_every`` generations the constants of this many of the best
    distinct trees are fitted by ``optimizer_iterations`` Levenberg-Marquardt steps on the training loss
    (``gprl.evolve.constants``; finite-difference Jacobians through the kernels) and written back into the
    population; the final Pareto front's trees are fitted too. 0 (the default) turns it off.
"""


class SymbolicRegressor(RegressorMixin, _SymbolicBase):
    __doc__ = ("Symbolic regression by GPU tree GP (multi-target y via multi-output trees).\n"
               + _DOC_PARAMS + """
    linear_scaling: each tree output f is read as a + b * f with the intercept a and slope b the
    least-squares fit on the training rows (Keijzer 2003), gathered in the fused fitness pass; they are part
    of predict and of the formulas. "auto" (default): on for "mse" and "rmse", off for "mae".
    optimize_constants fits the metric itself: Gauss-Newton steps for "mse" and "rmse", iteratively
    reweighted least squares for "mae" (``RegressionObjective.gauss_newton_terms``), with the sample
    weights; a step is kept only where the training loss decreases. With 500 trees and 50 generations (CPU,
    seeds 0-4) fitting 10 trees every 5 generations lowered the mean training MSE of Keijzer-4 by 13% and of
    Nguyen-5 8-fold but raised Pagie-1's by 24%, took 1.4-2.2x the fit time, and raised the mean test MSE
    of Nguyen-5 (20 training rows; mostly one seed) and Pagie-1.
    A target whose largest magnitude is outside ``TARGET_RANGE`` (1e-12 to 1e12) is standardised (weighted
    mean and standard deviation) for the search, whose float32 losses would otherwise overflow or underflow;
    the scaling is folded into predict and the formulas, and losses, ``target_loss`` and the callback are in
    y's units (``parsimony`` then weighs against the standardised loss).
""")

    def __init__(self, *, population_size: int | str = "auto", generations: int = 100,
                 functions: Sequence[str] = ("add", "sub", "mul", "div"), const_prob: float = 0.2,
                 const_range: tuple[float, float] = (-1.0, 1.0), max_len: int = 64, max_depth: int = 17,
                 init_depth: tuple[int, int] = (2, 6), tournament_size: int = 7, elitism: int = 1,
                 rates: dict[str, float] | None = None, parsimony: float = 0.0, metric: str = "mse",
                 model_selection: str = "simplest", target_loss: float | None = None,
                 time_limit: float | None = None, validation_fraction: float | str | None = "auto",
                 standardize: bool = False, linear_scaling: bool | str = "auto",
                 optimize_constants: int = 0, optimize_every: int = 1, optimizer_iterations: int = 8,
                 random_state=None, device: str = "auto", callback: Callable | None = None, verbose: int = 0):
        self.linear_scaling = linear_scaling
        self.optimize_constants, self.optimize_every = optimize_constants, optimize_every
        self.optimizer_iterations = optimizer_iterations
        self.population_size, self.generations, self.functions = population_size, generations, functions
        self.const_prob, self.const_range, self.max_len, self.max_depth = (
            const_prob, const_range, max_len, max_depth)
        self.init_depth, self.tournament_size, self.elitism, self.rates = (
            init_depth, tournament_size, elitism, rates)
        self.parsimony, self.metric, self.model_selection = parsimony, metric, model_selection
        self.target_loss, self.time_limit, self.validation_fraction = (
            target_loss, time_limit, validation_fraction)
        self.standardize, self.random_state, self.device = standardize, random_state, device
        self.callback, self.verbose = callback, verbose

    def fit(self, X, y, sample_weight=None) -> SymbolicRegressor:
        started = time.perf_counter()
        X = self._check_X(X, fitting=True)
        y = check_targets(y, X.shape[0], "regression")
        self._multi_target = y.ndim == 2
        self.n_targets_ = 1 if y.ndim == 1 else y.shape[1]
        w = self._check_weight(sample_weight, X.shape[0])
        scaling = self._linear_scaling()
        return self._fit(X, y, w, lambda X, y, w, dev: RegressionObjective(
            X, y, w, metric=self.metric, device=dev, scaling=scaling), started)

    def _linear_scaling(self) -> bool:
        v = self.linear_scaling
        if v == "auto":
            return self.metric != "mae"
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"linear_scaling must be True, False or 'auto', got {v!r}")
        if v and self.metric == "mae":
            raise ValueError("linear_scaling=True fits a + b * f by least squares, which metric='mae' does "
                             "not measure; use linear_scaling=False or 'auto' with 'mae'")
        return bool(v)

    def predict(self, X) -> np.ndarray:
        out = self._outputs(X)
        return out if self._multi_target else out[:, 0]


    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # multi-target y via multi-output trees
        return tags


class SymbolicClassifier(ClassifierMixin, _SymbolicBase):
    __doc__ = ("Symbolic classification by GPU tree GP: one tree output per class (softmax), or one output "
               "and a sigmoid for two classes; any label type.\n" + _DOC_PARAMS + """
    linear_scaling: read each tree output f as the logit a + b * f, with the bias a and scale b fitted per
    tree (L2-regularised logistic regression on the device, ``gprl.sr.scaling``) while evolving; they are
    part of the exported formula.
    optimize_constants fits the cross-entropy (also for ``metric="accuracy"``, as its smooth surrogate). On
    wine and breast_cancer (75/25 splits) fitting 20 trees every 10 generations lowered held-out accuracy by
    1-2.5 points (the fitted constants overfit 130-430 training rows; H100, split seeds 0-4).
    ensemble_size: evolve this many independent populations of ``population_size`` trees (islands without
    migration, evaluated together), pick a formula from each island's front by ``model_selection``, and
    average their logits: the model is the one formula ``(f_1 + ... + f_K) / K`` (``sympy()``; its members
    are the ``equations_`` rows ``members_``, and ``best_index_`` is the member with the lowest loss). It
    reduces the variance of the search (a different feature subset per run) at K times the cost. With
    ``validation_fraction=0.2`` each island picks its member on the held-out rows: the setting behind the
    README's breast_cancer and wine figures.
""")
    _task = "classification"
    _multi_target = False

    def __init__(self, *, population_size: int = 2000, generations: int = 100,
                 functions: Sequence[str] = ("add", "sub", "mul", "div"), const_prob: float = 0.2,
                 const_range: tuple[float, float] = (-1.0, 1.0), max_len: int = 64, max_depth: int = 17,
                 init_depth: tuple[int, int] = (2, 6), tournament_size: int = 7, elitism: int = 1,
                 rates: dict[str, float] | None = None, parsimony: float = 0.0005,
                 metric: str = "cross_entropy", model_selection: str = "accuracy",
                 target_loss: float | None = None,
                 time_limit: float | None = None, validation_fraction: float | None = None,
                 standardize: bool = True, linear_scaling: bool = False, ensemble_size: int = 1,
                 optimize_constants: int = 0, optimize_every: int = 1, optimizer_iterations: int = 8,
                 random_state=None,
                 device: str = "auto", callback: Callable | None = None, verbose: int = 0):
        self.linear_scaling, self.ensemble_size = linear_scaling, ensemble_size
        self.optimize_constants, self.optimize_every = optimize_constants, optimize_every
        self.optimizer_iterations = optimizer_iterations
        self.population_size, self.generations, self.functions = population_size, generations, functions
        self.const_prob, self.const_range, self.max_len, self.max_depth = (
            const_prob, const_range, max_len, max_depth)
        self.init_depth, self.tournament_size, self.elitism, self.rates = (
            init_depth, tournament_size, elitism, rates)
        self.parsimony, self.metric, self.model_selection = parsimony, metric, model_selection
        self.target_loss, self.time_limit, self.validation_fraction = (
            target_loss, time_limit, validation_fraction)
        self.standardize, self.random_state, self.device = standardize, random_state, device
        self.callback, self.verbose = callback, verbose

    def fit(self, X, y, sample_weight=None) -> SymbolicClassifier:
        started = time.perf_counter()
        X = self._check_X(X, fitting=True)
        y = check_targets(y, X.shape[0], "classification")
        from sklearn.utils.multiclass import type_of_target

        if type_of_target(y) == "continuous":
            raise ValueError("Unknown label type: continuous. y holds continuous values; a classifier needs "
                             "class labels (use SymbolicRegressor for a numeric target)")
        self.classes_, codes = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(f"y holds only one class ({self.classes_[0]!r}); "
                             "a classifier needs at least two")
        w = self._check_weight(sample_weight, X.shape[0])
        K = len(self.classes_)
        return self._fit(X, codes.ravel(), w, lambda X, y, w, dev: ClassificationObjective(
            X, y, K, w, metric=self.metric, device=dev, scaling=bool(self.linear_scaling)), started)

    def decision_function(self, X) -> np.ndarray:
        """The model's logits (tree outputs, linearly scaled with ``linear_scaling``): ``[D]`` logits of
        the second class for two classes, else ``[D, n_classes]``."""
        out = self._outputs(X)
        return out[:, 0] if len(self.classes_) == 2 else out

    def predict_proba(self, X) -> np.ndarray:
        return probabilities(self.decision_function(X))

    def predict(self, X) -> np.ndarray:
        z = self.decision_function(X)
        return self.classes_[(z > 0).astype(int) if z.ndim == 1 else z.argmax(axis=1)]
