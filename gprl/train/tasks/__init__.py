"""What a training run optimises: the small interface between the trainer and a problem.

A :class:`Task` turns a population into fitness (higher is better when ``maximize``), keeps whatever state it
needs across generations (checkpointed), and exports the best individual as files at the end. The trainer
(:mod:`gprl.train.trainer`) owns the run directory, checkpoints, progress and W&B, so a new task (regression,
classification) only implements this interface and registers itself in :data:`TASKS`
(one module per task kind in this package).
"""

from __future__ import annotations

import importlib
import importlib.util

from gprl.train.tasks.base import Task

__all__ = ["TASKS", "Task", "task_class"]


# task name -> "module:class", imported on first use: a policy run needs none of the SR extra's packages
TASKS: dict[str, str] = {
    "policy": "gprl.train.tasks.policy:PolicyTask",
    "sr": "gprl.train.tasks.supervised:SRTask",
    "classification": "gprl.train.tasks.supervised:ClassificationTask",
}


def task_class(name: str) -> type[Task]:
    """The :class:`Task` registered as ``name`` (``task.name`` in the configuration)."""
    if name not in TASKS:
        raise ValueError(f"task.name: unknown task {name!r}; choose one of {sorted(TASKS)}")
    module, cls = TASKS[name].split(":")
    if name != "policy" and not all(importlib.util.find_spec(m) for m in ("sklearn", "pandas")):
        raise ImportError(f'task={name} needs scikit-learn and pandas: pip install -e ".[sr]"')
    return getattr(importlib.import_module(module), cls)


def __getattr__(name: str) -> type[Task]:
    # gprl.train.tasks.PolicyTask etc.: the registered classes, imported on first use
    for kind, target in TASKS.items():
        if target.endswith(":" + name):
            return task_class(kind)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
