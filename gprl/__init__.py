"""gprl: GPU tree genetic programming for interpretable control policies, regression and classification."""

from . import datasets, feynman, functions, objectives, selection, strategy, variation
from .algorithm import GeneticProgramming, ParetoArchive
from .dataset import Dataset
from .objectives import ClassificationObjective, RegressionObjective
from .population import Population
from .strategy import get_strategy, set_strategy
from .variation import (
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

__all__ = [
    "OPS", "ClassificationObjective", "Dataset", "GeneticProgramming", "ParetoArchive", "Population",
    "RegressionObjective", "SymbolicClassifier", "SymbolicRegressor", "VariationParams", "constant_mutation",
    "crossover", "datasets", "delete_mutation", "feynman", "functions", "get_strategy", "hoist_mutation",
    "insert_mutation", "multi_constant_mutation", "multi_point_mutation", "objectives", "output_mutation",
    "point_mutation", "selection", "set_strategy", "strategy", "subtree_exchange", "subtree_mutation", "variation",
    "vary",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "envs":  # the environment adapters: imported on first use (`import gprl` loads no simulator code)
        import importlib

        return importlib.import_module(".envs", __name__)
    # the estimators need scikit-learn (the "sr" extra): imported on first use so `import gprl` works without it
    if name in ("SymbolicRegressor", "SymbolicClassifier", "estimators"):
        import importlib

        estimators = importlib.import_module(".estimators", __name__)  # `from . import` would recurse here
        return estimators if name == "estimators" else getattr(estimators, name)
    raise AttributeError(f"module 'gprl' has no attribute {name!r}")
