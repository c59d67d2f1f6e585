"""The Hydra config tree of train.py, shipped as gprl.configs so that gprl.evolve_policy composes it too."""
