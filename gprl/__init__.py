"""gprl: GPU tree genetic programming for interpretable control policies, regression and classification."""

from . import datasets, feynman, functions, objectives, selection, variation
from .algorithm import GeneticProgramming, ParetoArchive
from .dataset import Dataset
from .estimators import SymbolicClassifier, SymbolicRegressor
from .objectives import ClassificationObjective, RegressionObjective
from .population import Population
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
    "crossover", "datasets", "delete_mutation", "feynman", "functions", "hoist_mutation", "insert_mutation",
    "multi_constant_mutation", "multi_point_mutation", "objectives", "output_mutation", "point_mutation",
    "selection", "subtree_exchange", "subtree_mutation", "variation", "vary",
]
__version__ = "0.1.0"
