"""Run checkpoints: everything a run needs to continue bit-identically, written atomically.

A checkpoint holds the population, the GP's generation counter and archive, the task's state (e.g. the
observation normaliser), the trainer's counters, the RNG states of torch/NumPy/Python and a *fingerprint*
(task, environment, input/output sizes, population shape) that a resumed run must match.
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .population import Population, atomic_torch_save

FORMAT = "gprl.checkpoint"
_NAME = re.compile(r"gen_(\d+)\.pt$")


def rng_states() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                             "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_states(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        # a run written on a machine with more GPUs (e.g. by torchrun) resumes on one with fewer
        for i, s in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(s, i)


def population_state(pop: Population) -> dict[str, Any]:
    return {"n_in": pop.n_in, "n_out": pop.n_out,
            **{k: t.cpu() for k, t in zip(("kind", "code", "out", "value", "size"), pop.tensors())}}


def population_from_state(state: dict[str, Any], device) -> Population:
    return Population(state["kind"], state["code"], state["out"], state["value"], state["size"],
                      n_in=int(state["n_in"]), n_out=int(state["n_out"])).to(device)


def checkpoint_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / "checkpoints"


def save_checkpoint(run_dir: str | os.PathLike, generation: int, state: dict[str, Any], keep: int = 2) -> Path:
    """Writes ``checkpoints/gen_<generation>.pt`` atomically and keeps the newest ``keep`` checkpoints."""
    folder = checkpoint_dir(run_dir)
    path = folder / f"gen_{generation:06d}.pt"
    atomic_torch_save({"format": FORMAT, "version": 1, "generation": generation, "rng": rng_states(), **state}, path)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if _NAME.search(p.name)), key=lambda p: int(_NAME.search(p.name)[1]))


def load_checkpoint(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The newest checkpoint of ``run_dir`` (a clear error when there is none)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"resume: run directory {str(run_dir)!r} does not exist; pass resume=<run dir>")
    found = list_checkpoints(run_dir)
    if not found:
        raise FileNotFoundError(f"resume: {str(run_dir)!r} holds no checkpoints (expected checkpoints/gen_*.pt)")
    state = torch.load(found[-1], map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError(f"resume: {found[-1]} is not a gprl checkpoint")
    return state


def check_fingerprint(saved: dict[str, Any], current: dict[str, Any], run_dir: str | os.PathLike) -> None:
    """Raises a ValueError naming every field where the run to resume differs from this configuration."""
    diffs = [f"{k}: run has {saved.get(k)!r}, this configuration {current.get(k)!r}"
             for k in sorted(set(saved) | set(current)) if saved.get(k) != current.get(k)]
    if diffs:
        raise ValueError(f"resume: the run in {str(run_dir)!r} does not match this configuration ("
                         + "; ".join(diffs) + "). Resume with the run's own settings (see its config.yaml) or "
                         "start a new run; the old run was left untouched.")
