"""gprl: GPU tree genetic programming for interpretable control policies, regression and classification.

Sub-packages, one concept each: ``core`` (population encoding, function table, datasets), ``backend`` (kernel
build, ops, evaluation strategies), ``evolve`` (selection, variation, constant fitting, the generation loop),
``sr`` (regression and classification), ``rl`` (policies), ``train`` (the app behind train.py); ``envs`` holds
the environment adapters.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

from gprl.backend import strategy
from gprl.backend.strategy import get_strategy, set_strategy
from gprl.core import functions
from gprl.core.dataset import Dataset
from gprl.core.population import Population
from gprl.evolve import selection, variation
from gprl.evolve.algorithm import GeneticProgramming, ParetoArchive
from gprl.evolve.variation import (
    OPS,
    VariationParams,
    constant_mutation,
    crossover,
    delete_mutation,
    hoist_mutation,
    insert_mutation,
    multi_constant_mutation,
    multi_point_mutation,
    output_mutation,
    point_mutation,
    subtree_exchange,
    subtree_mutation,
    vary,
)
from gprl.sr import datasets, feynman, objectives
from gprl.sr.objectives import ClassificationObjective, RegressionObjective

__all__ = [
    "OPS", "ClassificationObjective", "Dataset", "GeneticProgramming", "ParetoArchive", "Population",
    "RegressionObjective", "SymbolicClassifier", "SymbolicRegressor", "VariationParams", "constant_mutation",
    "crossover", "datasets", "delete_mutation", "evolve_policy", "feynman", "functions", "get_strategy",
    "hoist_mutation",
    "insert_mutation", "multi_constant_mutation", "multi_point_mutation", "objectives", "output_mutation",
    "point_mutation", "selection", "set_strategy", "strategy", "subtree_exchange", "subtree_mutation",
    "variation", "vary",
]
__version__ = "0.1.0"

# module paths of the flat layout -> where they live now (imported with a DeprecationWarning)
MOVED = {
    "gprl.population": "gprl.core.population",
    "gprl.functions": "gprl.core.functions",
    "gprl.dataset": "gprl.core.dataset",
    "gprl.devices": "gprl.core.devices",
    "gprl._build": "gprl.backend.build",
    "gprl.ops": "gprl.backend.ops",
    "gprl.strategy": "gprl.backend.strategy",
    "gprl.algorithm": "gprl.evolve.algorithm",
    "gprl.selection": "gprl.evolve.selection",
    "gprl.variation": "gprl.evolve.variation",
    "gprl.constants": "gprl.evolve.constants",
    "gprl.objectives": "gprl.sr.objectives",
    "gprl.scaling": "gprl.sr.scaling",
    "gprl.estimators": "gprl.sr.estimators",
    "gprl.model_export": "gprl.sr.export",
    "gprl.datasets": "gprl.sr.datasets",
    "gprl.feynman": "gprl.sr.feynman",
    "gprl.policy": "gprl.rl.policy",
    "gprl.export": "gprl.rl.export",
    "gprl.trainer": "gprl.train.trainer",
    "gprl.tasks": "gprl.train.tasks",
    "gprl.supervised": "gprl.train.tasks.supervised",
    "gprl.checkpoint": "gprl.train.checkpoint",
    "gprl.distributed": "gprl.train.distributed",
    "gprl.tracking": "gprl.train.tracking",
    "gprl.config": "gprl.train.config",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import gprl.<old name>`` keeps working for one release, with a warning naming the new path."""

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(f"{spec.name} moved to {new}; import it from there", DeprecationWarning, stacklevel=3)
        return importlib.import_module(new)

    def exec_module(self, module):
        pass


sys.meta_path.append(_MovedModules())


def __getattr__(name: str):
    # the environment adapters: imported on first use (`import gprl` loads no simulator code)
    if name == "envs":
        return importlib.import_module("gprl.envs")
    # the estimators need scikit-learn (the "sr" extra): imported on first use so `import gprl` works
    # without it
    # the policy search from Python needs Hydra (the "train" extra): imported on first use
    if name == "evolve_policy":
        return importlib.import_module("gprl.train.policy_search").evolve_policy
    if name in ("SymbolicRegressor", "SymbolicClassifier", "estimators"):
        estimators = importlib.import_module("gprl.sr.estimators")
        return estimators if name == "estimators" else getattr(estimators, name)
    raise AttributeError(f"module 'gprl' has no attribute {name!r}")
