"""Evolve an interpretable policy: ``python train.py env=hopper``
(Hydra app; see configs/ and gprl.train.trainer).

Several processes, one search: ``torchrun --nproc_per_node=K train.py ...`` (gprl.train.distributed)."""

from __future__ import annotations

import os
import sys
import tempfile

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from gprl.train.config import register

register()  # typed schema: Hydra rejects wrong override types


def _is_override(arg: str) -> bool:
    return "=" in arg and not arg.startswith("-")


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def _the_runs_own_overrides() -> None:
    """``resume=<run dir>``: the run's own command-line overrides (its ``.hydra/overrides.yaml``) go first, so
    ``python train.py resume=<dir>`` continues the run as it was started; an override given now wins over
    the run's for the same key (search settings still need ``resume_allow_changes=true``)."""
    args = sys.argv[1:]
    given = {_key(a): a.split("=", 1)[1] for a in args if _is_override(a)}
    run = given.get("resume")
    saved = os.path.join(run, ".hydra", "overrides.yaml") if run else ""
    if not os.path.isfile(saved):
        return  # not a resume, or a run started without Hydra's output folder: this command's own settings
    from omegaconf import OmegaConf

    saved_overrides = [str(o) for o in OmegaConf.load(saved)]
    run_task = next((o.split("=", 1)[1] for o in reversed(saved_overrides) if _key(o) == "task"), "policy")
    if given.get("task", run_task) != run_task:
        return  # another task has other groups (env or dataset): the checkpoint's check names the mismatch
    own = [o for o in saved_overrides if _key(o) not in given and not _key(o).startswith("hydra.")]
    if not own:
        return
    if os.environ.get("RANK", "0") in ("", "0"):
        print(f"gprl: resume: the run's own settings {' '.join(own)}", flush=True)
    # before this command's overrides (a nested key given now applies over a mapping of the run's)
    first = next(i for i, a in enumerate(args) if _is_override(a))
    sys.argv[1:] = [*args[:first], *own, *args[first:]]


def _rank() -> str:
    """The one-line errors' tag under torchrun (" (rank K)"); empty in a single process."""
    return f" (rank {os.environ['RANK']})" if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1 else ""


def _a_run_directory_this_run_can_own() -> None:
    """One line and exit, before Hydra writes its files: a run directory on a read-only disk, or one that a
    live run holds (``hydra.run.dir=`` or ``resume=``; the run takes the lock itself once it starts,
    gprl.train.rundir)."""
    args = sys.argv[1:]
    if any(a in ("-m", "--multirun") for a in args):
        return  # every job gets its own folder (and takes its lock)
    from gprl.train.rundir import holder

    given = {_key(a): a.split("=", 1)[1] for a in args if _is_override(a)}
    run_dir = given.get("hydra.run.dir") or "outputs"  # Hydra's default: outputs/<date>/<time>
    folder = os.path.abspath(run_dir)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.access(folder, os.W_OK):
        raise SystemExit(f"error{_rank()}: cannot write the run directory {run_dir}: {folder} is read-only "
                         "(or not writable for this user); pass hydra.run.dir=<a writable folder>")
    for key in ("hydra.run.dir", "resume"):
        busy = holder(given[key]) if given.get(key) else None
        if busy is not None:
            raise SystemExit(f"error{_rank()}: {busy}")


def _no_output_for_other_ranks() -> None:
    """Under torchrun only rank 0 owns the run directory: the other ranks' Hydra writes nothing (no .hydra/,
    no log file) and its output folder is one shared empty scratch folder, so no rank leaves folders behind
    (not even one that is killed)."""
    rank = os.environ.get("RANK", "0")
    if rank in ("", "0") or int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1:
        return
    scratch = os.path.join(tempfile.gettempdir(), "gprl-rank-scratch")
    keep = [a for a in sys.argv[1:] if not a.lstrip("+").startswith(
        ("hydra.run.dir=", "hydra.sweep.dir=", "hydra.output_subdir=", "hydra/job_logging="))]
    sys.argv[1:] = [*keep, f"hydra.run.dir={scratch}", f"hydra.sweep.dir={scratch}",
                    "hydra.output_subdir=null", "hydra/job_logging=none"]


@hydra.main(version_base="1.3", config_path="configs", config_name="config")
def main(cfg: DictConfig) -> None:
    from gprl.train.distributed import DistributedError
    from gprl.train.rundir import RunDirectoryError
    from gprl.train.trainer import run

    try:
        run(cfg, HydraConfig.get().runtime.output_dir)
    except (ValueError, TypeError, FileNotFoundError, ImportError, DistributedError,
            RunDirectoryError) as err:
        # bad input, a busy run directory or a full disk: one clear line instead of a traceback
        # (HYDRA_FULL_ERROR=1 still shows it)
        if os.environ.get("HYDRA_FULL_ERROR") == "1":
            raise
        raise SystemExit(f"error{_rank()}: {err}") from None


if __name__ == "__main__":
    _the_runs_own_overrides()
    _a_run_directory_this_run_can_own()
    _no_output_for_other_ranks()
    main()
