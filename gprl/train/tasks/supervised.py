"""Symbolic regression and classification as training tasks: ``train.py task=sr|classification dataset=...``.

The fitness is the estimators' (:mod:`gprl.objectives`): the fused regression loss on a prepared
:class:`gprl.Dataset` (with ``task.linear_scaling``, of each output's least-squares a + b * tree, exported
with the model), or softmax/sigmoid cross-entropy; lower is better (``maximize = False``). Every
generation is also logged with the best tree's size and its held-out test score. The task keeps its own
Pareto archive of training losses (best tree per length, checkpointed); at the end the model is picked from
that front like the estimators do (``task.model_selection``) and exported as formulas
(:mod:`gprl.sr.export`).

Features may be z-scored (``task.standardize``); that is done in float32 exactly as the exported
``model.py`` does it, so the exported predictions reproduce the training ones.

Distributed (:mod:`gprl.train.distributed`): by default every rank scores its contiguous shard of the
population on the whole dataset and the losses are gathered (bit-identical to one process on the CPU). With
``dist.shard=data`` every rank scores the whole population on its shard of the rows instead (for datasets
too large for one device) and the per-rank losses are combined as float64 partial sums (:class:`RowShard`):
close to, but not bit-identical with, a single process.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import torch

from gprl.core.population import METRICS, Population
from gprl.evolve.algorithm import ParetoArchive
from gprl.sr import datasets
from gprl.sr.estimators import MODEL_SELECTIONS, pareto_scores, select_model
from gprl.sr.export import export_model, front_equation
from gprl.sr.objectives import CLASSIFICATION_METRICS, ClassificationObjective, RegressionObjective
from gprl.train.checkpoint import population_from_state, population_state
from gprl.train.distributed import Dist
from gprl.train.tasks.base import Task


def load_dataset(cfg: dict[str, Any], task: str) -> datasets.SupervisedData:
    """The ``dataset`` config section as a train/test split (a named benchmark, or ``name: csv`` +
    ``path``)."""
    if not cfg or not cfg.get("name"):
        raise ValueError(f"task={'sr' if task == 'regression' else task} needs a dataset: "
                         "pass dataset=<name> (configs/dataset/, e.g. dataset=koza_quartic or dataset=wine)")
    name = cfg["name"]
    test_size, seed = float(cfg.get("test_size", 0.25)), int(cfg.get("seed", 0))
    if name == "csv":
        if not cfg.get("path"):
            raise ValueError("dataset=csv needs dataset.path=<file.csv> and dataset.target=<column>")
        if cfg.get("target") is None:
            raise ValueError("dataset=csv needs dataset.target=<column name or index>")
        data = datasets.load_csv(cfg["path"], cfg["target"], features=cfg.get("columns"), task=task,
                                 test_size=test_size, seed=seed)
    else:
        if name.replace(".", "_") not in datasets.names():
            raise ValueError(f"dataset.name: unknown dataset {name!r}; choose one of {datasets.names()} "
                             "or dataset=csv with dataset.path=...")
        data = datasets.load(name, n_samples=int(cfg.get("n_samples", 10_000)), test_size=test_size,
                             seed=seed, noise=float(cfg.get("noise", 0.0)))
    if data.task != task:
        other = "sr" if data.task == "regression" else "classification"
        raise ValueError(f"dataset {name!r} is a {data.task} dataset; train it with task={other}")
    return data


class RowShard:
    """An objective on this rank's rows of a dataset split across the ranks (``dist.shard=data``).

    A call returns the loss over *all* rows: each rank's mean loss times its row count, summed over the ranks
    in float64 and divided by the total count (RMSE: the square root of the combined MSE). The per-rank losses
    are float32 and the sum's order is the transport's, so it is not bit-identical to one process. Anything
    else (``data``, ``y``, ``w``, ``n_out``) is the local objective's."""

    def __init__(self, local, dist: Dist, n_local: int, n_total: int, rmse: bool = False):
        self.local, self.dist, self.n_local, self.n_total, self.rmse = local, dist, n_local, n_total, rmse
        self.metric = "rmse" if rmse else local.metric
        self._y_var: float | None = None

    @property
    def y_var(self) -> float:
        """For R^2: the (population) variance of y over all rows, averaged over the targets. Computed on first
        use, which every rank reaches together (a collective)."""
        if self._y_var is None:
            y = self.local.data.y.double()
            mean = self.dist.sum(y.sum(0), "adding up target sums") / self.n_total
            ss = self.dist.sum((y - mean).square().sum(0), "adding up target variances")
            self._y_var = float((ss / self.n_total).mean())
        return self._y_var

    def reduce(self, value: torch.Tensor) -> torch.Tensor:
        """Per-tree means over this rank's rows → means over all rows (float64)."""
        return self.dist.sum(value.double() * self.n_local, "adding up the loss partial sums") / self.n_total

    def __call__(self, population: Population, coefficients=None) -> torch.Tensor:
        with self.dist.agree("evaluating the population on this rank's rows"):
            local = self.local(population, coefficients)  # given output scalings add up over rows too
        loss = self.reduce(local)
        return (loss.sqrt() if self.rmse else loss).float()

    def __getattr__(self, name: str):
        return getattr(self.local, name)


class SupervisedTask(Task):
    """Shared machinery of :class:`SRTask` and :class:`ClassificationTask`."""

    maximize = False
    score_name = "loss"
    artifact = "model"
    kind = ""  # "regression" | "classification"
    name = ""  # the task's name in TASKS

    def __init__(self, cfg: dict[str, Any], device: str | torch.device | None = None,
                 dist: Dist | None = None):
        task = cfg["task"]
        self.dist = dist or Dist()
        self.shard_rows = self.dist.enabled and (cfg.get("dist") or {}).get("shard", "population") == "data"
        self.data = load_dataset(cfg.get("dataset") or {}, self.kind)
        self.dataset_cfg = dict(cfg.get("dataset") or {})
        self.device = torch.device(("cuda" if torch.cuda.is_available() else "cpu")
                                   if device in (None, "auto") else device)
        self.parsimony = float(cfg["gp"].get("parsimony") or 0.0)
        self.digits = int(task.get("digits", 4))
        self.model_selection = task.get("model_selection") or "best"
        if self.model_selection not in MODEL_SELECTIONS:
            raise ValueError(f"task.model_selection must be one of {list(MODEL_SELECTIONS)}, "
                             f"got {self.model_selection!r}")
        X = self.data.X_train.astype(np.float32)
        if task.get("standardize"):
            sd = X.std(axis=0)
            self.mean, self.std = X.mean(axis=0), np.where(sd > 0, sd, 1.0).astype(np.float32)
        else:
            self.mean, self.std = np.zeros(X.shape[1], np.float32), np.ones(X.shape[1], np.float32)
        self.n_in = X.shape[1]
        self.obs_names = list(self.data.feature_names)
        self.max_len = int(cfg["gp"]["max_len"])
        self.train = self._split(self._scaled(self.data.X_train), self.data.y_train, "training")
        self.test = (self._split(self._scaled(self.data.X_test), self.data.y_test, "test")
                     if len(self.data.X_test) else None)
        self.n_out = self.train.n_out
        self.archive = ParetoArchive(self.n_in, self.n_out, self.max_len, self.device)

    @classmethod
    def from_config(cls, cfg: dict[str, Any], device: str | None, dist: Dist | None = None) -> SupervisedTask:
        return cls(cfg, device, dist)

    def _split(self, X: np.ndarray, y: np.ndarray, part: str):
        """The objective on all rows, or with ``dist.shard=data`` on this rank's rows (:class:`RowShard`)."""
        if not self.shard_rows:
            return self._objective(X, y)
        self.dist.check_shardable(len(X), f"the number of {part} rows (dataset)", "row (dist.shard=data)")
        rmse = self.metric == "rmse"
        if rmse and np.ndim(y) > 1 and np.shape(y)[1] > 1:
            raise ValueError("dist.shard=data with task.metric=rmse needs a single target (the mean of "
                             "per-target RMSEs does not add up over rows); use task.metric=mse or "
                             "dist.shard=population")
        a, b = self.dist.bounds(len(X))
        return RowShard(self._objective(X[a:b], y[a:b], "mse" if rmse else None), self.dist, b - a, len(X),
                        rmse)

    def _train_loss(self, population: Population) -> torch.Tensor:
        if self.shard_rows:  # every tree on this rank's rows, partial sums added up over the ranks
            return self.train(population)
        (a, b), P = self.dist.bounds(len(population)), len(population)
        with self.dist.agree("evaluating the population"):
            local = self.train(population[a:b])
        return self.dist.gather(local, P, "gathering the losses")

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        # float32 arithmetic, as model.py computes (X - MEAN) / STD
        return (X.astype(np.float32) - self.mean.astype(np.float32)) / self.std.astype(np.float32)

    def _objective(self, X: np.ndarray, y: np.ndarray, metric: str | None = None):
        raise NotImplementedError

    def _coefficients(self, trees: Population) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The output scaling (intercepts, slopes ``[P, n_out]``) the model applies, fitted on the training
        rows; None where the model is the trees' outputs."""
        return None

    def _extra_metrics(self, tree: Population, prefix: str, objective, coef=None) -> dict[str, float]:
        """Metrics of one tree on ``objective``'s rows, read through ``coef`` (``_coefficients``)."""
        return {}

    def fingerprint(self) -> dict[str, Any]:
        return {"task": self.name, "dataset": self.data.name, "n_in": self.n_in, "n_out": self.n_out,
                "n_train": len(self.data.X_train), "dataset_seed": int(self.dataset_cfg.get("seed", 0)),
                "test_size": float(self.dataset_cfg.get("test_size", 0.25))}

    def evaluate(self, population: Population, generation: int) -> tuple[torch.Tensor, dict[str, Any]]:
        loss = self._train_loss(population)
        loss = torch.where(torch.isfinite(loss), loss, torch.full_like(loss, math.inf))
        self.archive.update(population, loss)
        i = int(torch.argmin(loss))
        best = population[i]
        coef = self._coefficients(best)
        finite = loss[torch.isfinite(loss)]
        metrics: dict[str, Any] = {"best_loss": float(loss[i]),
                                   "mean_loss": float(finite.mean()) if len(finite) else math.inf,
                                   "best_size": int(best.lengths()[0]),
                                   **self._extra_metrics(best, "train", self.train, coef)}
        if self.test is not None:
            metrics["test_loss"] = float(self.test(best, coef)[0])
            metrics.update(self._extra_metrics(best, "test", self.test, coef))
        fitness = loss
        if self.parsimony:  # selection sees it; the archive and the metrics keep the plain loss
            fitness = loss + self.parsimony * population.lengths().float()
        return fitness, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"archive_loss": self.archive.loss.cpu().clone(),
                "archive_trees": population_state(self.archive.trees)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.archive.loss = state["archive_loss"].to(self.device)
        self.archive.trees = population_from_state(state["archive_trees"], self.device)

    def _output_names(self) -> list[str]:
        raise NotImplementedError

    def _classes(self) -> list[Any] | None:
        return None

    def finish(self, population: Population, fitness: torch.Tensor | None, out_dir: str) -> dict[str, Any]:
        lengths, losses, trees = self.archive.front()
        if len(trees) == 0:
            raise RuntimeError("no generation was evaluated (or every tree had a non-finite loss): "
                               "nothing to export")
        coef = self._coefficients(trees)
        if coef is not None:  # the exported formulas' own losses (simplified scaling)
            losses = self.train(trees, coef)
        complexity, train_loss = lengths.cpu().numpy(), losses.cpu().numpy().astype(np.float64)
        chosen = select_model(complexity, train_loss, self.model_selection)
        test_loss = (self.test(trees, coef).cpu().numpy().astype(np.float64) if self.test is not None
                      else np.full(len(trees), math.nan))
        chosen_coef = None if coef is None else tuple(c[chosen:chosen + 1] for c in coef)
        coef = None if coef is None else [c.cpu().numpy() for c in coef]
        score = pareto_scores(complexity, train_loss)
        cpu = trees.to("cpu")
        names = self.obs_names
        front = [{"complexity": int(c), "loss": float(tl), "test_loss": float(te), "score": float(s),
                  "selected": int(k == chosen),
                  "equation": front_equation(cpu[k], self.mean, self.std, names, self.digits,
                                             None if coef is None else (coef[0][k], coef[1][k]))
                  if self.dist.is_main else ""}
                 for k, (c, tl, te, s) in enumerate(zip(complexity, train_loss, test_loss, score))]
        tree = cpu[chosen]
        results = {"train_loss": float(train_loss[chosen]), "tree_length": int(complexity[chosen])}
        results.update(self._extra_metrics(trees[chosen], "train", self.train, chosen_coef))
        if self.test is not None:
            results["test_loss"] = float(test_loss[chosen])
            results.update(self._extra_metrics(trees[chosen], "test", self.test, chosen_coef))
        if not self.dist.is_main:  # every rank took part in the losses above; rank 0 writes the files
            return {"files": {}, "formulas": {}, "dataset": self.data.name, "front_size": len(front),
                    **results}
        meta = {"dataset": self.data.name, "task": self.name, "metric": self.train.metric,
                "linear_scaling": coef is not None,
                "model_selection": self.model_selection, "n_train": len(self.data.X_train),
                "n_test": len(self.data.X_test), "dataset_config": self.dataset_cfg,
                "ground_truth": self.data.formula, **results}
        files = export_model(out_dir, tree, self.mean.tolist(), self.std.tolist(), names,
                             self._output_names(), self.kind, self._classes(), meta, front, self.digits,
                             None if coef is None else (coef[0][chosen], coef[1][chosen]))
        with open(files["json"]) as f:
            formulas = json.load(f)["formulas"]
        return {"files": files, "formulas": formulas, "dataset": self.data.name, "front_size": len(front),
                **results}


class SRTask(SupervisedTask):
    """Symbolic regression: the estimators' fused regression loss (``task.metric``: mse | mae | rmse)."""

    kind, name = "regression", "sr"

    def _objective(self, X: np.ndarray, y: np.ndarray, metric: str | None = None) -> RegressionObjective:
        return RegressionObjective(X, y, metric=metric or self.metric, device=self.device,
                                   scaling=self.scaling)

    def __init__(self, cfg: dict[str, Any], device: str | torch.device | None = None,
                 dist: Dist | None = None):
        self.metric = cfg["task"].get("metric") or "mse"
        if self.metric not in METRICS:
            raise ValueError(f"task.metric must be one of {list(METRICS)} for task=sr, got {self.metric!r}")
        self.scaling = self._resolve_scaling(cfg, dist or Dist())
        super().__init__(cfg, device, dist)

    def _resolve_scaling(self, cfg: dict[str, Any], dist: Dist) -> bool:
        """``task.linear_scaling``: auto is on for mse/rmse, except where the rows are split across processes
        (each rank would fit its own rows)."""
        value = cfg["task"].get("linear_scaling", "auto")
        shard_rows = dist.enabled and (cfg.get("dist") or {}).get("shard", "population") == "data"
        if value in (None, "auto"):
            return self.metric in ("mse", "rmse") and not shard_rows
        if not isinstance(value, bool):
            raise TypeError(f"task.linear_scaling must be true, false or auto, got {value!r}")
        if value and self.metric == "mae":
            raise ValueError("task.linear_scaling=true fits a + b * f by least squares, which "
                             "task.metric=mae does not measure; use task.metric=mse|rmse or "
                             "task.linear_scaling=false")
        if value and shard_rows:
            raise ValueError("task.linear_scaling=true needs every row in one process (the fit is over all "
                             "rows); use dist.shard=population or task.linear_scaling=false")
        return value

    def _coefficients(self, trees: Population) -> tuple[torch.Tensor, torch.Tensor] | None:
        return self.train.coefficients(trees, simplify=True) if self.scaling else None

    def _extra_metrics(self, tree: Population, prefix: str, objective, coef=None) -> dict[str, float]:
        # R^2 of the model: 1 - MSE / Var(y) (population variance, as sklearn's r2_score)
        if coef is None:
            mse = tree.fitness(objective.data, metric="mse")
        else:
            a, b = coef
            y = objective.data.y.double().reshape(len(objective.data.y), -1)
            out = tree.forward(objective.data.X)[0].double().reshape(len(y), -1)
            mse = (a + b * out - y).square().mean(0).mean().reshape(1)
        if isinstance(objective, RowShard):  # dist.shard=data: over all ranks' rows
            mse, var = float(objective.reduce(mse)[0]), objective.y_var
        else:
            mse, var = float(mse[0]), float(objective.data.y.double().var(dim=0, unbiased=False).mean())
        return {f"{prefix}_r2": 1.0 - mse / var if var > 0 else math.nan}

    def _output_names(self) -> list[str]:
        return list(self.data.target_names)


class ClassificationTask(SupervisedTask):
    """Classification: softmax (sigmoid for two classes) cross-entropy of one tree output per class, as
    :class:`gprl.SymbolicClassifier` (``task.metric``: cross_entropy | accuracy, the latter as an error
    rate)."""

    kind, name = "classification", "classification"

    def __init__(self, cfg: dict[str, Any], device: str | torch.device | None = None,
                 dist: Dist | None = None):
        self.metric = cfg["task"].get("metric") or "cross_entropy"
        if self.metric not in CLASSIFICATION_METRICS:
            raise ValueError(f"task.metric must be one of {list(CLASSIFICATION_METRICS)} "
                             f"for task=classification, got {self.metric!r}")
        super().__init__(cfg, device, dist)

    def _objective(self, X: np.ndarray, y: np.ndarray, metric: str | None = None) -> ClassificationObjective:
        classes = self.data.classes
        codes = np.searchsorted(classes, y)
        return ClassificationObjective(X, codes, len(classes), metric=self.metric, device=self.device)

    def _extra_metrics(self, tree: Population, prefix: str, objective, coef=None) -> dict[str, float]:
        # the decision rule of SymbolicClassifier.predict and model.py: logit > 0, or the arg max
        out = tree.forward(objective.data.X)[0]
        pred = (out[:, 0] > 0).long() if objective.n_out == 1 else out.argmax(-1)
        accuracy = ((pred == objective.y).double() * objective.w).sum()  # w: 1 in all over these rows
        if isinstance(objective, RowShard):
            accuracy = objective.reduce(accuracy)
        return {f"{prefix}_accuracy": float(accuracy)}

    def _output_names(self) -> list[str]:
        classes = self._classes()
        return ["logit"] if len(classes) == 2 else [f"score_{c}" for c in classes]

    def _classes(self) -> list[Any]:
        return self.data.classes.tolist()

