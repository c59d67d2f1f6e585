"""Experiment tracking with Weights & Biases (optional: ``pip install -e ".[train]"``).

``Tracker(mode="disabled")`` never imports wandb. ``offline`` writes the run under ``<dir>/wandb`` for a later
``wandb sync``; ``online`` streams it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

MODES = ("online", "offline", "disabled")


class Tracker:
    def __init__(self, mode: str = "offline", *, config: dict[str, Any] | None = None, directory: str = ".",
                 project: str = "gprl", entity: str | None = None, group: str | None = None,
                 tags: Sequence[str] | None = None, name: str | None = None, run_id: str | None = None):
        if mode not in MODES:
            raise ValueError(f"wandb.mode must be one of {list(MODES)}, got {mode!r}")
        self.mode, self.run = mode, None
        if mode == "disabled":
            return
        try:
            import wandb
        except ImportError as err:
            raise ImportError('W&B tracking needs wandb: pip install -e ".[train]" (or set wandb.mode=disabled)') \
                from err
        self._wandb = wandb
        os.makedirs(directory, exist_ok=True)
        self.run = wandb.init(mode=mode, project=project, entity=entity, group=group, tags=list(tags or []),
                              name=name, config=config, dir=directory, id=run_id, resume="allow" if run_id else None,
                              settings=wandb.Settings(silent=True, console="off"))

    @property
    def run_id(self) -> str | None:
        return None if self.run is None else self.run.id

    @property
    def run_dir(self) -> str | None:
        return None if self.run is None else self.run.dir

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self.run is not None:
            self.run.log(metrics, step=step)

    def log_formula(self, formulas: dict[str, str], step: int, **extra: Any) -> None:
        """The best formula as text and as a table row (one column per action)."""
        if self.run is None:
            return
        text = "\n".join(f"{k} = {v}" for k, v in formulas.items())
        cols = ["generation", *extra, *formulas]
        table = self._wandb.Table(columns=cols, data=[[step, *extra.values(), *formulas.values()]])
        self.run.log({"best_formula": self._wandb.Html(f"<pre>{text}</pre>"), "best_formula_table": table}, step=step)
        self.run.summary["best_formula"] = text

    def log_artifact(self, name: str, kind: str, paths: Sequence[str]) -> None:
        if self.run is None:
            return
        art = self._wandb.Artifact(name, type=kind)
        for p in paths:
            if os.path.exists(p):
                art.add_file(p)
        self.run.log_artifact(art)

    def log_video(self, path: str, key: str = "replay") -> None:
        if self.run is not None and os.path.exists(path):
            self.run.log({key: self._wandb.Video(path, format="mp4")})

    def summary(self, values: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.summary.update(values)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
