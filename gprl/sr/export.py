"""Export a regression/classification model found by ``train.py task=sr|classification``.

The formulas of :mod:`gprl.core.formulas`, as in the policy export, with a supervised head instead of an
action map: ``model.txt`` / ``model.tex`` (reading form over the feature names, standardisation folded in),
``model.py`` (NumPy only: ``predict(X)``, plus ``predict_proba``/``decision_function`` for classifiers; the
tree is evaluated in float32 in the kernels' order, so it reproduces the training predictions),
``model.json`` (tree, feature names, standardisation, classes, metadata) and ``equations.csv`` (the Pareto
front: complexity, loss, test_loss, equation).
"""

from __future__ import annotations

import csv
import inspect
import json
import os
from collections.abc import Sequence
from fractions import Fraction
from string import Template
from typing import Any

import numpy
import sympy

from gprl.core.formulas import (
    KERNEL_CONSTANTS,
    LIBM_SOURCE,
    PROTECTED_FUNCTIONS,
    float32_array,
    plain,
    readable,
    round_floats,
    safe_names,
    scores_source,
    tree_expressions,
    tree_record,
    write_atomic,
)
from gprl.core.population import Population


def exact_number(c: float) -> sympy.Expr:
    """``c`` as a sympy Rational when it is exactly a fraction of denominator <= 12 (a simplified linear
    scaling's 0, 1, 1/2, ...: ``0.5 * (2 * x)`` reads ``x``), else as a Float."""
    q = Fraction(float(c)).limit_denominator(12)
    return sympy.Rational(q.numerator, q.denominator) if float(q) == float(c) else sympy.Float(float(c))


def scaled(exprs: Sequence[sympy.Expr], scaling: tuple[Sequence[float], Sequence[float]] | None
           ) -> list[sympy.Expr]:
    """``a_k + b_k * expr_k`` for each output given the linear scaling's (intercepts, slopes); as they are
    without it."""
    if scaling is None:
        return list(exprs)
    return [exact_number(a) + exact_number(b) * e for a, b, e in zip(*scaling, exprs)]


def front_equation(tree: Population, mean: Sequence[float], std: Sequence[float], names: Sequence[str],
                   digits: int, scaling: tuple[Sequence[float], Sequence[float]] | None = None) -> str:
    """A cheap reading form for the front table (no sympy.simplify: the front may hold 60 trees)."""
    names = safe_names(names, tree.n_in, "x")  # the identifiers of model.txt / model.py
    exprs = scaled(tree_expressions(tree, mean, std, names), scaling)
    exprs = [round_floats(plain(e), digits) for e in exprs]
    return "; ".join(sympy.sstr(e) for e in exprs)


# model.py; $functions is REGRESSION_FUNCTIONS or CLASSIFICATION_FUNCTIONS
MODEL_TEMPLATE = Template('''"""Exported gprl $task model for $dataset (NumPy only; no gprl, no torch).

Formulas over the raw features (reading form; scores() computes the same function in float32
in the training kernels' order):

$formulas
"""

import numpy

$constants
FEATURE_NAMES = $feature_names
OUTPUT_NAMES = $output_names
$scaling
CLASSES = $classes
MEAN = $mean
STD = $std
META = $meta


$protected


$libm


def _check(X, dtype):
    X = numpy.asarray(X, dtype=dtype)
    if X.ndim != 2 or X.shape[-1] != $n_in:
        raise ValueError(f'X must be [n_samples, $n_in] ({FEATURE_NAMES}), got shape {X.shape}')
    return X


$scores


$functions
''')

REGRESSION_FUNCTIONS = '''def predict(X):
    """Predictions [n] (or [n, n_targets]) for X [n, n_features]: INTERCEPT + SLOPE * the tree outputs."""
    y = INTERCEPT + SLOPE * scores(X).astype(numpy.float64)
    return y[:, 0] if y.shape[1] == 1 else y'''


# SymbolicClassifier.predict_proba, and its source is the exported model.py's: one definition for both
def probabilities(z):
    """Class probabilities [n, n_classes] from logits: a sigmoid of the one logit of two classes, else a
    softmax."""
    if z.ndim == 1:
        p = 1.0 / (1.0 + numpy.exp(-numpy.clip(z, -700, 700)))
        return numpy.stack([1.0 - p, p], axis=1)
    z = z - z.max(axis=1, keepdims=True)
    e = numpy.exp(z)
    return e / e.sum(axis=1, keepdims=True)


CLASSIFICATION_FUNCTIONS = '''def decision_function(X):
    """Logits: [n] of the second class for two classes, else [n, n_classes]."""
    z = scores(X).astype(numpy.float64)
    return z[:, 0] if len(CLASSES) == 2 else z


''' + inspect.getsource(probabilities) + '''

def predict_proba(X):
    """Class probabilities [n, n_classes] (sigmoid or softmax)."""
    return probabilities(decision_function(X))


def predict(X):
    """Class labels [n] (as in training: logit > 0, or the arg max)."""
    z = decision_function(X)
    k = (z > 0).astype(int) if z.ndim == 1 else \\
        numpy.argmax(numpy.where(numpy.isnan(z), -numpy.inf, z), axis=1)
    return numpy.asarray(CLASSES)[k]'''


def _module_source(exact: Sequence[sympy.Expr], names: Sequence[str], out_names: Sequence[str], task: str,
                   classes: Sequence[Any] | None, text: str, meta: dict[str, Any], record: dict[str, Any],
                   mean: Sequence[float], std: Sequence[float],
                   scaling: tuple[Sequence[float], Sequence[float]] | None) -> str:
    scores = scores_source("X", names, exact, record, len(out_names), column="X[:, {i}]", batch="shape[:1]",
                           formula_doc="The folded formulas (raw units, float64) for X [n, n_features].",
                           scores_doc="Tree outputs [n, n_outputs] in float32, in the kernels' order.")
    return MODEL_TEMPLATE.substitute(
        task=task, dataset=meta.get("dataset", "?"),
        formulas="\n".join("    " + ln for ln in text.strip().splitlines()), constants=KERNEL_CONSTANTS,
        feature_names=repr(list(names)), output_names=repr(list(out_names)),
        classes=repr(None if classes is None else list(classes)), mean=float32_array(mean),
        std=float32_array(std), meta=repr(json.dumps(meta, sort_keys=True)),
        protected=PROTECTED_FUNCTIONS, libm=LIBM_SOURCE, n_in=len(names), scores=scores,
        scaling=_scaling_source(task, len(out_names), scaling),
        functions=REGRESSION_FUNCTIONS if task == "regression" else CLASSIFICATION_FUNCTIONS)


def _scaling_source(task: str, n_out: int, scaling: tuple[Sequence[float], Sequence[float]] | None) -> str:
    """model.py's INTERCEPT and SLOPE (regression: predict reads them; 0 and 1 without linear scaling)."""
    if task != "regression":
        return ""
    a, b = scaling if scaling is not None else ([0.0] * n_out, [1.0] * n_out)
    return (f"INTERCEPT = numpy.array({[float(x) for x in a]!r})  # least-squares linear scaling of the "
            f"tree outputs\nSLOPE = numpy.array({[float(x) for x in b]!r})")


def export_model(out_dir: str | os.PathLike, tree: Population, mean: Sequence[float], std: Sequence[float],
                 feature_names: Sequence[str], output_names: Sequence[str], task: str,
                 classes: Sequence[Any] | None, meta: dict[str, Any], front: list[dict[str, Any]],
                 digits: int = 4, scaling: tuple[Sequence[float], Sequence[float]] | None = None
                 ) -> dict[str, str]:
    """Writes model.txt, model.tex, model.py, model.json and equations.csv; returns their paths.

    ``scaling`` (regression): per output the intercept and slope of the linear scaling that the prediction
    applies to the tree's outputs; the formulas include them."""
    os.makedirs(out_dir, exist_ok=True)
    names = safe_names(feature_names, tree.n_in, "x")
    onames = safe_names(output_names, tree.n_out, "y")
    exact = scaled(tree_expressions(tree, mean, std, names), scaling)
    reading = [readable(e, digits) for e in exact]
    if task == "regression":
        head = "prediction"
    elif tree.n_out == 1:
        head = f"logit of P(class {classes[1]!r}); predict {classes[1]!r} where it is > 0"
    else:
        head = "one score (logit) per class; softmax gives the probabilities, the arg max the class"
    text = "".join(f"{a} = {sympy.sstr(e)}\n" for a, e in zip(onames, reading))
    text_file = (f"# gprl {task} model for {meta.get('dataset', '?')}: {head}; raw feature units "
                 "('/' and log are protected: x/0 -> 1, log|x|; gt(a, b) = 1 if a > b else -1; "
                 "see model.py)\n" + text)
    record = {"format": "gprl.model", "version": 1, "task": task, "feature_names": names,
              "output_names": onames, "classes": None if classes is None else list(classes),
              "standardization": {"mean": [float(m) for m in mean], "std": [float(s) for s in std]},
              "tree": tree_record(tree), "formulas": {a: str(e) for a, e in zip(onames, reading)},
              "scaling": None if scaling is None else {"intercept": [float(x) for x in scaling[0]],
                                                       "slope": [float(x) for x in scaling[1]]},
              "exact_formulas": {a: sympy.srepr(e) for a, e in zip(onames, exact)}, "meta": meta}
    paths = {k: os.path.join(out_dir, f"model.{k}") for k in ("txt", "tex", "py", "json")}
    paths["csv"] = os.path.join(out_dir, "equations.csv")
    write_atomic(paths["txt"], text_file)
    escaped = [n.replace("_", r"\_") for n in onames]
    rows = [rf"\mathrm{{{n}}} &= {sympy.latex(e)}" for n, e in zip(escaped, reading)]
    write_atomic(paths["tex"], "\\begin{align}\n" + " \\\\\n".join(rows) + "\n\\end{align}\n")
    write_atomic(paths["py"], _module_source(exact, names, onames, task, classes, text, meta, record["tree"],
                                             mean, std, scaling))
    write_atomic(paths["json"], json.dumps(record, indent=1))
    tmp = paths["csv"] + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["complexity", "loss", "test_loss", "score", "selected", "equation"])
        w.writeheader()
        w.writerows(front)
    os.replace(tmp, paths["csv"])
    return paths
