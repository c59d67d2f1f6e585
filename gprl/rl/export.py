"""Export a tree policy as formulas in raw observation units: text, LaTeX, a NumPy-only module and JSON.

The exact expression of action ``k`` is the tree's output ``k`` in raw observation units
(:func:`gprl.core.formulas.tree_expressions`) with the action map applied on top (see ``gprl.rl.policy``).
``policy.py`` evaluates the tree in float32 in the kernels' order, so it reproduces the training actions;
``policy.txt`` and ``policy.tex`` show the reading form (:func:`gprl.core.formulas.readable`).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from string import Template
from typing import Any

import sympy

from gprl.core.formulas import (
    KERNEL_CONSTANTS,
    LIBM_SOURCE,
    PROTECTED_FUNCTIONS,
    float32_array,
    readable,
    safe_names,
    scores_source,
    tree_expressions,
    tree_record,
    write_atomic,
)
from gprl.core.population import Population


def policy_expressions(tree: Population, mean: Sequence[float], std: Sequence[float], transform: str,
                       low: Sequence[float] | None, high: Sequence[float] | None,
                       obs_names: Sequence[str]) -> list[sympy.Expr]:
    """Exact expressions (protected forms) of every action in raw observation units."""
    folded = tree_expressions(tree, mean, std, obs_names)
    if transform == "tanh":
        result = []
        for k, e in enumerate(folded):
            center, half = (float(low[k]) + float(high[k])) / 2, (float(high[k]) - float(low[k])) / 2
            term = sympy.tanh(e) if half == 1.0 else sympy.Float(half) * sympy.tanh(e)
            result.append(term if center == 0.0 else sympy.Float(center) + term)
        return result
    if transform == "clip":
        return [sympy.Min(sympy.Max(e, sympy.Float(float(low[k]))), sympy.Float(float(high[k])))
                for k, e in enumerate(folded)]
    return folded


# policy.py; $bounds is BOUNDS_TEMPLATE where the actions are bounded, else empty
POLICY_TEMPLATE = Template('''"""Exported gprl policy for $env (NumPy only; no gprl, no torch).

Formulas in raw observation units (reading form of formula_scores; act() computes the same
function in float32 in the training kernels' order):

$formulas
"""

import numpy

$constants
OBS_NAMES = $obs_names
ACTION_NAMES = $action_names
ACTION_TRANSFORM = $transform
MEAN = $mean
STD = $std
${bounds}META = $meta


$protected


# float32 transcendental functions: the C library's, so act() follows gprl's CPU kernels to the
# last bit of a few values; without a loadable libm, float64 rounded once (within an ulp)
def _r(fn, a):
    return fn(numpy.asarray(a, numpy.float64)).astype(numpy.float32)


$libm


def _check(obs, dtype):
    obs = numpy.asarray(obs, dtype=dtype)
    if obs.shape[-1] != $n_obs:
        raise ValueError(f'obs must have $n_obs entries in its last axis, got {obs.shape}')
    return obs


$scores


def act(obs):
    """The action for obs [n_obs] (or a batch [B, n_obs])."""
    y = scores(obs)
$action
''')

BOUNDS_TEMPLATE = Template("""LOW = $low
HIGH = $high
CENTER, HALF = (LOW + HIGH) / 2, (HIGH - LOW) / 2
""")

# the rest of act(), per action transform
ARGMAX_ACTION = "    return numpy.argmax(numpy.where(numpy.isnan(y), -numpy.inf, y), axis=-1)"
# several discrete choices (MultiDiscrete, MultiBinary): an argmax over each one's consecutive scores
SEGMENTS_ACTION = Template("""    y = numpy.where(numpy.isnan(y), -numpy.inf, y)
    return numpy.stack([numpy.argmax(s, axis=-1) for s in numpy.split(y, $cuts, axis=-1)], axis=-1)""")
MAPPED_ACTION = Template("""    a = $mapped
    # as the environments do: NaN -> 0, then the bounds
    return $bounded.astype(numpy.float32)""")
MAPPED = {"tanh": "CENTER + HALF * _r(numpy.tanh, y)", "clip": "numpy.minimum(numpy.maximum(y, LOW), HIGH)",
          "none": "y"}


def numpy_source(exprs: Sequence[sympy.Expr], obs_names: Sequence[str], action_names: Sequence[str],
                 transform: str, readable_text: str, meta: dict[str, Any], record: dict[str, Any],
                 mean: Sequence[float], std: Sequence[float], low: Sequence[float] | None,
                 high: Sequence[float] | None, segments: Sequence[int] | None = None) -> str:
    """A self-contained module (NumPy only) with ``act(obs) -> action`` (:data:`POLICY_TEMPLATE`).

    ``act`` evaluates the tree in float32 in the kernels' order (normalise, tree, action map), so a replay
    follows the training trajectories; ``formula_scores`` evaluates the folded raw-unit formula (float64)."""
    if transform == "argmax":
        cuts = [sum(segments[:k + 1]) for k in range(len(segments) - 1)] if segments else None
        action = SEGMENTS_ACTION.substitute(cuts=cuts) if segments else ARGMAX_ACTION
    else:
        bounded = "numpy.clip(numpy.nan_to_num(a, nan=0.0), LOW, HIGH)" if low is not None \
            else "numpy.nan_to_num(a, nan=0.0)"
        action = MAPPED_ACTION.substitute(mapped=MAPPED[transform], bounded=bounded)
    scores = scores_source("obs", obs_names, exprs, record, len(action_names), column="obs[..., {i}]",
                           batch="shape[:-1]",
                           formula_doc="The folded formulas (raw units, float64) for obs [..., n_obs].",
                           scores_doc="Tree outputs (before the action map) in float32, in the kernels' "
                                      "order.")
    bounds = "" if low is None else BOUNDS_TEMPLATE.substitute(low=float32_array(low),
                                                                 high=float32_array(high))
    return POLICY_TEMPLATE.substitute(
        env=meta.get("env", "?"),
        formulas="\n".join("    " + ln for ln in readable_text.strip().splitlines()),
        constants=KERNEL_CONSTANTS, obs_names=repr(list(obs_names)),
        action_names=repr(list(action_names)), transform=repr(transform), mean=float32_array(mean),
        std=float32_array(std), bounds=bounds, meta=repr(json.dumps(meta, sort_keys=True)),
        protected=PROTECTED_FUNCTIONS, libm=LIBM_SOURCE, n_obs=len(obs_names), scores=scores,
        action=action)


def latex_source(exprs: Sequence[sympy.Expr], action_names: Sequence[str]) -> str:
    escaped = [name.replace("_", r"\_") for name in action_names]
    rows = [rf"a_{{\mathrm{{{name}}}}} &= {sympy.latex(e)}" for name, e in zip(escaped, exprs)]
    return "\\begin{align}\n" + " \\\\\n".join(rows) + "\n\\end{align}\n"


def export_policy(out_dir: str | os.PathLike, tree: Population, mean: Sequence[float], std: Sequence[float],
                  transform: str, low: Sequence[float] | None, high: Sequence[float] | None,
                  obs_names: Sequence[str] | None, action_names: Sequence[str] | None,
                  meta: dict[str, Any], digits: int = 4, segments: Sequence[int] | None = None
                  ) -> dict[str, str]:
    """Writes policy.txt, policy.tex, policy.py and policy.json into ``out_dir``; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    onames = safe_names(obs_names, tree.n_in, "obs")
    anames = safe_names(action_names, tree.n_out, "a")
    exact = policy_expressions(tree, mean, std, transform, low, high, onames)
    reading = [readable(e, digits) for e in exact]
    head = (f"argmax over each of the consecutive groups of {list(segments)} scores" if segments
            else "argmax over the scores" if transform == "argmax" else f"action transform: {transform}")
    text = "".join(f"{a} = {sympy.sstr(e)}\n" for a, e in zip(anames, reading))
    text_file = (f"# gprl policy for {meta.get('env', '?')}: one formula per action, raw observation units "
                 f"({head}; '/' and log are protected: x/0 -> 1, log|x|; gt(a, b) = 1 if a > b else -1, "
                 f"lt likewise, ifpos(a, b, c) = b if a > 0 else c; see policy.py)\n" + text)
    record = {"format": "gprl.policy", "version": 1, "obs_names": onames, "action_names": anames,
              "normalization": {"mean": [float(m) for m in mean], "std": [float(s) for s in std]},
              "action": {"transform": transform, "low": None if low is None else [float(v) for v in low],
                         "high": None if high is None else [float(v) for v in high],
                         "segments": None if segments is None else [int(n) for n in segments]},
              "tree": tree_record(tree), "formulas": {a: str(e) for a, e in zip(anames, reading)},
              "exact_formulas": {a: sympy.srepr(e) for a, e in zip(anames, exact)}, "meta": meta}
    paths = {k: os.path.join(out_dir, f"policy.{k}") for k in ("txt", "tex", "py", "json")}
    write_atomic(paths["txt"], text_file)
    write_atomic(paths["tex"], latex_source(reading, anames))
    write_atomic(paths["py"], numpy_source(exact, onames, anames, transform, text, meta, record["tree"], mean,
                                           std, low, high, segments))
    write_atomic(paths["json"], json.dumps(record, indent=1))
    return paths


class ExportedPolicy:
    """A policy as :func:`export_policy` wrote it (``policy.py``, NumPy only, and ``policy.json``):
    ``act(obs)``, ``formulas`` (one reading-form formula per action) and ``save(folder)``."""

    FILES = ("txt", "tex", "py", "json")

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        if not (self.folder / "policy.py").is_file():
            raise FileNotFoundError(f"no exported policy in {str(self.folder)!r} (policy.py is missing)")
        self.record = json.loads((self.folder / "policy.json").read_text())
        spec = importlib.util.spec_from_file_location(f"gprl_policy_{id(self)}", self.folder / "policy.py")
        self.module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.module)

    def act(self, obs):
        """The action for ``obs`` [n_obs] (or a batch [B, n_obs]) in the environment's own units."""
        return self.module.act(obs)

    @property
    def formulas(self) -> dict[str, str]:
        return dict(self.record["formulas"])

    @property
    def validation_return(self) -> float:
        return float(self.record["meta"]["validation"]["validation_return"])

    def save(self, folder: str | os.PathLike) -> dict[str, str]:
        """Copies policy.txt, .tex, .py and .json into ``folder``; returns their paths."""
        os.makedirs(folder, exist_ok=True)
        return {k: shutil.copyfile(self.folder / f"policy.{k}", Path(folder) / f"policy.{k}")
                for k in self.FILES}

    def __repr__(self) -> str:
        lines = "\n".join(f"  {a} = {f}" for a, f in self.formulas.items())
        return f"ExportedPolicy({self.record['meta'].get('env')!r}, {str(self.folder)!r}):\n{lines}"
