"""gprl: GPU tree genetic programming for interpretable control policies, regression and classification."""

from . import functions
from .dataset import Dataset
from .population import Population

__all__ = ["Dataset", "Population", "functions"]
__version__ = "0.1.0"
