"""Run checkpoints: everything a run needs to continue bit-identically, written atomically.

A checkpoint holds the population, the GP's generation counter and archive, the task's state (e.g. the
observation normaliser), the trainer's counters, the RNG states of torch/NumPy/Python and a *fingerprint*
(task, environment, input/output sizes, population shape) that a resumed run must match, plus the
settings that steer the search (:func:`search_config`), which a resumed run may change only on purpose.

Checkpoints are read with ``torch.load(weights_only=True)``: tensors, plain containers and the NumPy RNG
state only, never arbitrary objects.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import sys
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gprl.core.population import Population, atomic_torch_save
from gprl.train.rundir import torch_write_failed, writing

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


def save_checkpoint(run_dir: str | os.PathLike, generation: int, state: dict[str, Any],
                    keep: int = 2) -> Path:
    """Writes ``checkpoints/gen_<generation>.pt`` atomically and keeps the newest ``keep`` checkpoints.

    A full or read-only disk raises :class:`gprl.train.rundir.WriteFailed`; the older checkpoints are left
    as they were (the new one is written to a temporary file, renamed only once whole)."""
    folder = checkpoint_dir(run_dir)
    path = folder / f"gen_{generation:06d}.pt"
    try:
        with writing(path):
            atomic_torch_save({"format": FORMAT, "version": 1, "generation": generation, "rng": rng_states(),
                               **state}, path)
    except RuntimeError as err:
        failed = torch_write_failed(err, path)
        if failed is None:
            raise
        raise failed from err
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return path


def list_checkpoints(run_dir: str | os.PathLike) -> list[Path]:
    folder = checkpoint_dir(run_dir)
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.iterdir() if _NAME.search(p.name)),
                  key=lambda p: int(_NAME.search(p.name)[1]))


def _numpy_allowed():
    """Safe loading that also admits NumPy arrays (np.random.get_state() holds a uint32 array)."""
    rebuild = np.ndarray((0,)).__reduce__()[0]
    allowed: list[Any] = [np.ndarray, np.dtype, type(np.dtype(np.uint32)), rebuild]
    if torch.__version__ >= "2.6":  # (object, name): numpy 1.x and 2.x name the reconstructor differently
        allowed += [(rebuild, "numpy.core.multiarray._reconstruct"),
                    (rebuild, "numpy._core.multiarray._reconstruct")]
    if not hasattr(torch.serialization, "safe_globals"):  # torch 2.4: process-wide only
        torch.serialization.add_safe_globals(allowed)
        return contextlib.nullcontext()
    return torch.serialization.safe_globals(allowed)


def _read(path: Path) -> dict[str, Any]:
    """One checkpoint file, or a ValueError whose message is the cause in a few words."""
    size = path.stat().st_size
    if size == 0:
        raise ValueError("empty file")
    if not zipfile.is_zipfile(path):  # torch.save writes a zip archive; its directory is at the end
        with open(path, "rb") as f:
            head = f.read(4)
        if head == b"PK\x03\x04":
            raise ValueError(f"truncated ({size} bytes, the zip archive's end is missing)")
        raise ValueError(f"not a torch checkpoint ({size} bytes of other data)")
    try:
        with warnings.catch_warnings(), _numpy_allowed():
            warnings.simplefilter("ignore")
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001  (any failure of this file is a reason to try the next one)
        refused = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        if refused:
            raise ValueError(f"holds an object that safe loading refuses ({refused[1]})") from None
        text = "" if "weights_only" in str(err) else (str(err).strip().splitlines() or [""])[0][:120]
        raise ValueError(f"unreadable ({type(err).__name__}{': ' + text if text else ''})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ValueError("not a gprl checkpoint")
    return state


def load_checkpoint(run_dir: str | os.PathLike, skipped: list[Path] | None = None) -> dict[str, Any]:
    """The newest intact checkpoint of ``run_dir``.

    A damaged newer one (a kill while the disk filled up, a truncated copy) is skipped with one line on
    stderr naming it and why; its path is appended to ``skipped``. A clear error when none is intact."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"resume: run directory {str(run_dir)!r} does not exist; "
                                "pass resume=<run dir>")
    found = list_checkpoints(run_dir)
    if not found:
        raise FileNotFoundError(f"resume: {str(run_dir)!r} holds no checkpoints "
                                "(expected checkpoints/gen_*.pt)")
    causes: list[str] = []
    for path in reversed(found):
        try:
            state = _read(path)
        except (OSError, ValueError) as err:
            causes.append(f"{path.parent.name}/{path.name} ({err})")
            if skipped is not None:
                skipped.append(path)
            continue
        if causes:
            print(f"gprl: resume: skipped {', '.join(causes)}; resuming from {path.parent.name}/{path.name}",
                  file=sys.stderr, flush=True)
        return state
    raise ValueError(f"resume: no intact checkpoint in {str(run_dir)!r}: {'; '.join(causes)}. Copy an intact "
                     "checkpoint into its checkpoints/ folder, or start a new run")


def check_fingerprint(saved: dict[str, Any], current: dict[str, Any], run_dir: str | os.PathLike) -> None:
    """Raises a ValueError naming every field where the run to resume differs from this configuration."""
    diffs = [f"{k}: run has {saved.get(k)!r}, this configuration {current.get(k)!r}"
             for k in sorted(set(saved) | set(current)) if saved.get(k) != current.get(k)]
    if diffs:
        raise ValueError(f"resume: the run in {str(run_dir)!r} does not match this configuration ("
                         + "; ".join(diffs) + "). Resume with the run's own settings "
                         "(see its config.yaml) or start a new run; the old run was left untouched.")


# Settings a resumed run may change freely: stopping rules, bookkeeping, logging, where it runs, and the final
# validation and export. Every other setting steers the search: a change makes the continued run another run.
FREE_SETTINGS = frozenset({
    "resume", "resume_allow_changes", "checkpoint_every", "keep_checkpoints", "progress", "wandb", "threads",
    "device", "dist", "gp.generations", "gp.time_limit", "gp.target_return", "env.per_backend",
    "task.per_backend", "task.digits", "task.validation_episodes", "task.validation_keep", "task.simplify"})
_UNSET = "<unset>"


def search_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """The settings of the (resolved) run configuration that steer the search, as stored in checkpoints."""
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        if key in FREE_SETTINGS:
            continue
        if isinstance(value, dict) and key in ("gp", "env", "task", "dataset"):
            value = {k: v for k, v in value.items() if f"{key}.{k}" not in FREE_SETTINGS}
        out[key] = value
    return out


def _diff(old: Any, new: Any, key: str, out: dict[str, tuple[Any, Any]]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            _diff(old.get(k, _UNSET), new.get(k, _UNSET), f"{key}.{k}", out)
    elif old != new:
        out[key] = (old, new)


def config_changes(saved: dict[str, Any] | None, current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (run's value, this configuration's)}`` for every stored search setting that differs.

    Only what the checkpoint stores is compared: settings added to the schema later, settings retired since
    that the run left null, and checkpoints written before settings were stored (``saved`` None), change
    nothing."""
    out: dict[str, tuple[Any, Any]] = {}
    for key, old in (saved or {}).items():
        new = current.get(key, _UNSET)
        if isinstance(old, dict) and isinstance(new, dict) and key in ("gp", "env", "task", "dataset"):
            for k, v in old.items():
                if v is not None or k in new:
                    _diff(v, new.get(k, _UNSET), f"{key}.{k}", out)
        else:
            _diff(old, new, key, out)
    return out


def check_config(saved: dict[str, Any] | None, current: dict[str, Any], run_dir: str | os.PathLike,
                 allow: bool = False) -> dict[str, dict[str, Any]]:
    """The search settings changed since the checkpoint, ``{key: {"run": old, "now": new}}``; a ValueError
    listing them unless ``allow`` (``resume_allow_changes=true``)."""
    changes = config_changes(saved, current)
    if changes and not allow:
        listed = ", ".join(f"{k} (run {a!r}, now {b!r})" for k, (a, b) in changes.items())
        raise ValueError(f"resume: this configuration changes settings that steer the search of the run in "
                         f"{str(run_dir)!r}: {listed}. Resume with the run's own settings (see its "
                         "config.yaml), or pass resume_allow_changes=true to continue with these changes on "
                         "purpose (recorded in config_resume.yaml and summary.json); the run was left "
                         "untouched.")
    return {k: {"run": a, "now": b} for k, (a, b) in changes.items()}
