"""The training loop behind ``train.py``: config → task → generations → checkpoints, metrics, export, W&B.

The loop is task-agnostic (:mod:`gprl.train.tasks`): per generation it evaluates the population (one batched
call), logs a JSON line and a progress bar, varies the population, and every ``checkpoint_every`` generations
writes a checkpoint atomically. Everything random derives from ``seed`` and the generation number, so a run
killed and resumed (``resume=<run dir>``) ends bit-identical to an uninterrupted one on the CPU.

Under ``torchrun`` (:mod:`gprl.train.distributed`) every rank runs this loop: the task evaluates the rank's
shard and gathers the results, rank 0 alone varies the population (broadcast to all ranks) and alone writes
the run directory, logs, W&B, checkpoints and exports. Checkpoints hold the full state, whatever the number
of ranks.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from gprl import envs
from gprl.core.population import Population
from gprl.evolve.algorithm import GeneticProgramming
from gprl.evolve.config import GPConfig
from gprl.train import distributed
from gprl.train.checkpoint import (
    check_config,
    check_fingerprint,
    list_checkpoints,
    load_checkpoint,
    population_from_state,
    population_state,
    save_checkpoint,
    search_config,
    set_rng_states,
)
from gprl.train.tasks import Task, task_class
from gprl.train.tracking import Tracker, banner, plot_curve

# the only fields that differ between equal runs
TIMING_KEYS = ("elapsed_s", "generation_s", "env_steps_per_s")


def _plain(cfg) -> dict[str, Any]:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg, resolve=True) if not isinstance(cfg, dict) else cfg


def resolve_backend(env_cfg: dict[str, Any]) -> str:
    backend = env_cfg.get("backend", "auto")
    if backend not in ("auto", *envs.BACKENDS):
        raise ValueError(f"env.backend: unknown backend {backend!r}; "
                         f"choose one of {['auto', *envs.BACKENDS]}")
    return envs.auto_backend(env_cfg["name"]) if backend == "auto" else backend


def cuda_visible() -> bool:
    """Whether this machine has an NVIDIA GPU, even where this torch or JAX build cannot use it."""
    return torch.cuda.is_available() or os.path.exists("/dev/nvidiactl")


def uses_env(cfg: dict[str, Any]) -> bool:
    """Whether the configured task runs an environment (policies; not regression/classification)."""
    return (cfg.get("task") or {}).get("name", "policy") == "policy"


def apply_backend_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fill ``null`` entries of ``gp``/``env`` from ``env.per_backend[<resolved backend>]``."""
    if not uses_env(cfg):
        return cfg
    env_cfg = cfg.get("env") or {}
    if not env_cfg.get("name"):
        raise ValueError("task=policy needs an environment: pass env=<name> (configs/env/, e.g. env=hopper)")
    backend = resolve_backend(env_cfg)
    if env_cfg.get("backend", "auto") == "auto" and backend in ("mujoco", "gymnasium") and cuda_visible():
        print(f"gprl: warning: a CUDA GPU is visible but env.backend=auto resolved to {backend} on the CPU "
              "(no JAX with CUDA); for Brax on the GPU install CUDA torch and pip install -e \".[gpu]\"",
              file=sys.stderr)
    env_cfg["backend"] = backend
    defaults = (env_cfg.get("per_backend") or {}).get(backend) or {}
    for section in ("gp", "env", "task"):
        for key, value in (defaults.get(section) or {}).items():
            if cfg[section].get(key) is None:
                cfg[section][key] = value
    return cfg


def make_task(cfg: dict[str, Any], dist: distributed.Dist | None = None) -> Task:
    cls = task_class(cfg["task"]["name"])
    dist = dist or distributed.Dist()
    task = cls.from_config(cfg, dist.task_device(cfg.get("device", "auto")), dist)
    try:
        dist.check_task_device(torch.device(task.device))
    except ValueError:
        task.close()
        raise
    return task


def make_gp(gp: dict[str, Any], task: Task, seed: int) -> GeneticProgramming:
    config = GPConfig.from_mapping(gp, maximize=task.maximize,
                                   elitism=min(int(gp["elitism"]), int(gp["population_size"])))
    return GeneticProgramming(task.n_in, task.n_out, config, seed=seed, device=getattr(task, "device", None))


def _check_positive(name: str, value, allow_none: bool = True) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a positive number{' or null' if allow_none else ''}, got {value!r}")


class Terminated(KeyboardInterrupt):
    """SIGTERM (sent by schedulers and ``timeout``), handled like Ctrl-C: checkpoint, then exit."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block SIGTERM raises :class:`Terminated`; the previous handler is restored after.

    Python can install signal handlers in the main thread only; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _exit_code(err: KeyboardInterrupt) -> int:
    return 128 + (signal.SIGTERM if isinstance(err, Terminated) else signal.SIGINT)


def _truncate_metrics(path: Path, generation: int) -> list[dict[str, Any]]:
    """Keeps the lines of generations < ``generation`` (a killed run may have logged past its checkpoint).

    A kill while a line was written leaves it torn: the last line is dropped with a note. A damaged line
    inside the file is a ValueError naming the file and line."""
    rows = []
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("generation"), int):
            if i == last:
                print(f"gprl: resume: dropped the torn last line of {path} (the run was killed while "
                      "writing it)", file=sys.stderr, flush=True)
                break
            raise ValueError(f"resume: {path}, line {i + 1} is not a JSON line of generation metrics; "
                             "delete or repair that line and resume again")
        if row["generation"] < generation:
            rows.append(row)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.replace(tmp, path)
    return rows


def run(cfg, run_dir: str | os.PathLike) -> dict[str, Any]:
    """Runs (or resumes) one training run; returns the summary also written to ``summary.json``.

    Under torchrun every rank calls this with the same configuration (see the module docstring). Ctrl-C and
    SIGTERM end it with exit status 130/143: during the generations after writing a checkpoint, during
    validation/export with the last one intact (both with the resume hint)."""
    with sigterm_as_interrupt():
        try:
            return _run(cfg, run_dir)
        except KeyboardInterrupt as err:  # during set-up, or a second interrupt while handling the first
            if os.environ.get("RANK", "0") in ("", "0"):
                folder = Path(cfg.get("resume") or run_dir)
                hint = f": continue with resume={folder}" if list_checkpoints(folder) else ""
                print(f"\ninterrupted{hint}")
            raise SystemExit(_exit_code(err)) from None


def _run(cfg, run_dir: str | os.PathLike) -> dict[str, Any]:
    cfg = _plain(cfg)
    # the schema holds both sections; a run keeps only the one its task reads (config.yaml, W&B, fingerprint)
    cfg.pop("dataset" if uses_env(cfg) else "env", None)
    cfg = apply_backend_defaults(cfg)
    gp_cfg = cfg["gp"]
    _check_positive("gp.population_size", gp_cfg.get("population_size"), allow_none=False)
    _check_positive("gp.generations", gp_cfg.get("generations"))
    _check_positive("gp.time_limit", gp_cfg.get("time_limit"))
    if gp_cfg.get("generations") is None and gp_cfg.get("time_limit") is None:
        raise ValueError("set gp.generations or gp.time_limit (or both): the run needs a stopping rule")
    every = int(cfg.get("checkpoint_every", 5))
    if every < 1:
        raise ValueError(f"checkpoint_every must be >= 1, got {every}")
    pop_size = int(gp_cfg["population_size"])
    islands = gp_cfg["islands"]  # its own range is GeneticProgramming's check
    if isinstance(islands, int) and islands >= 1 and pop_size % islands:
        raise ValueError(f"gp.population_size ({pop_size}) must be a multiple of gp.islands ({islands}); "
                         "change one of them")

    dist = distributed.init(cfg)  # world size 1 (every collective a no-op) without torchrun
    if (cfg.get("dist") or {}).get("shard", "population") == "population" or uses_env(cfg):
        dist.check_shardable(pop_size, "gp.population_size", "individual")
    # rank 0's run directory is the run's (the others' Hydra directories are scratch; they write nothing)
    run_dir = Path(dist.broadcast_object(str(cfg.get("resume") or run_dir)))
    dist.hint = (f" Checkpoints already written under {run_dir}/checkpoints are intact: continue with "
                 f"resume={run_dir} (with any number of processes).")
    main = dist.is_main

    state, damaged = None, []
    if cfg.get("resume"):
        with dist.agree("loading the checkpoint"):
            state = load_checkpoint(run_dir, damaged) if main else None  # raises before anything is written
        state = dist.broadcast_object(state, "sharing the checkpoint")

    threads = cfg.get("threads", "auto")
    if threads == "auto":
        # MuJoCo's own threads use the cores; torch's OpenMP pool would only contend with them
        if uses_env(cfg) and resolve_backend(cfg["env"]) in ("mujoco", "gymnasium") \
                and cfg.get("device", "auto") in ("auto", "cpu"):
            torch.set_num_threads(1)
    elif threads:
        torch.set_num_threads(int(threads))

    task = None
    try:
        with dist.agree("setting up the task"):
            task = make_task(cfg, dist)
        fingerprint = {**task.fingerprint(), "population_size": pop_size, "max_len": int(gp_cfg["max_len"])}
        search = search_config(cfg)  # stored in every checkpoint: a resume changes it only on purpose
        changes: dict[str, dict[str, Any]] = {}
        if state is not None:  # the same checks on every rank
            check_fingerprint(state["fingerprint"], fingerprint, run_dir)
            changes = check_config(state.get("config"), search, run_dir,
                                   bool(cfg.get("resume_allow_changes")))
        with dist.agree("writing the run directory"):
            if main:
                run_dir.mkdir(parents=True, exist_ok=True)
                for path in damaged:  # set aside: neither tried again nor counted by keep_checkpoints
                    path.replace(path.with_name(path.name + ".damaged"))
                from omegaconf import OmegaConf

                name = "config.yaml" if state is None else "config_resume.yaml"
                OmegaConf.save(OmegaConf.create({**cfg, "resume_changes": changes} if changes else cfg),
                               run_dir / name)
                if changes:
                    print("gprl: resume: continuing with changed search settings "
                          "(resume_allow_changes=true): "
                          + ", ".join(f"{k} (run {c['run']!r}, now {c['now']!r})"
                                      for k, c in changes.items()),
                          file=sys.stderr, flush=True)
                print(banner(cfg, str(task.device), str(run_dir),
                             None if state is None else int(state["generation"])),
                      flush=True)
    except BaseException:
        if task is not None:
            task.close()
        raise

    seed = int(cfg["seed"])
    gp = make_gp(gp_cfg, task, seed)

    def share(population: Population | None) -> Population:
        # rank 0 varies, every rank evaluates: the new population goes to all ranks
        return dist.broadcast_population(population, size=pop_size, n_in=task.n_in, n_out=task.n_out,
                                         max_len=int(gp_cfg["max_len"]), device=gp.device)

    metrics_path = run_dir / "metrics.jsonl"
    if state is None:
        pop = share(gp.init() if main else None)
        start_gen, elapsed0, total_steps, wandb_id = 0, 0.0, 0, None
        best_so_far = -math.inf if task.maximize else math.inf
        resume_changes: list[dict[str, Any]] = []
        if main:
            metrics_path.write_text("")
    else:
        set_rng_states(state["rng"])
        pop = population_from_state(state["population"], gp.device)
        gp.generation = start_gen = int(state["generation"])
        gp.archive.loss = state["archive_loss"].to(gp.device)
        gp.archive.trees = population_from_state(state["archive_trees"], gp.device)
        task.load_state_dict(state["task"])
        elapsed0, total_steps, best_so_far = state["elapsed"], state["total_env_steps"], state["best_so_far"]
        wandb_id = state.get("wandb_id")
        # every continuation with changed settings, in order (the run's record of them)
        resume_changes = [*state.get("resume_changes", []),
                          *([{"generation": start_gen, "changes": changes}] if changes else [])]
        if main:
            _truncate_metrics(metrics_path, start_gen)

    wcfg = cfg.get("wandb") or {}
    tracker = Tracker(wcfg.get("mode", "offline") if main else "disabled", config=cfg, directory=str(run_dir),
                      project=wcfg.get("project", "gprl"), entity=wcfg.get("entity"), group=wcfg.get("group"),
                      tags=wcfg.get("tags"), name=wcfg.get("name"), run_id=wandb_id)

    def snapshot(generation: int) -> dict[str, Any] | None:
        # the consistent state *before* evaluating ``generation``: what Ctrl-C and periodic checkpoints save
        if not main:
            return None
        return {"generation": generation, "fingerprint": fingerprint, "config": search,
                "resume_changes": resume_changes,
                "population": {k: v.clone() if torch.is_tensor(v) else v
                               for k, v in population_state(pop).items()},
                "archive_loss": gp.archive.loss.cpu().clone(),
                "archive_trees": population_state(gp.archive.trees),
                "task": task.state_dict(), "elapsed": elapsed0 + time.perf_counter() - t0,
                "total_env_steps": total_steps, "best_so_far": best_so_far, "wandb_id": tracker.run_id}

    def checkpoint(snap: dict[str, Any] | None) -> None:
        if snap is not None:
            save_checkpoint(run_dir, snap["generation"], {k: v for k, v in snap.items() if k != "generation"},
                            keep=int(cfg.get("keep_checkpoints", 2)))

    generations, time_limit = gp_cfg.get("generations"), gp_cfg.get("time_limit")
    best_key = f"best_{task.score_name}"  # best_return (policies) or best_loss (lower is better)
    target = gp_cfg.get("target_return")
    bar = None
    if cfg.get("progress", True) and main:
        from tqdm import tqdm

        bar = tqdm(total=generations, initial=start_gen, unit="gen", dynamic_ncols=True)
    t0 = time.perf_counter()
    g, fitness, stop = start_gen, None, ""
    if generations is not None and start_gen >= generations:
        stop = "generations"  # a resumed run that already reached gp.generations: export only
    snap = snapshot(g)
    try:
        with open(metrics_path if main else os.devnull, "a") as mf:
            while True:
                snap = snapshot(g)
                if stop or (g > start_gen and g % every == 0):
                    with dist.agree("writing a checkpoint"):
                        checkpoint(snap)
                if stop:
                    break
                tg = time.perf_counter()
                fitness, m = task.evaluate(pop, g)  # every rank: its shard, gathered
                steps = int(m.get("env_steps", 0))
                total_steps += steps
                best = float(m.get(best_key, fitness.max() if task.maximize else fitness.min()))
                best_so_far = max(best_so_far, best) if task.maximize else min(best_so_far, best)
                dt = time.perf_counter() - tg
                elapsed = elapsed0 + time.perf_counter() - t0
                if generations is not None and g + 1 >= generations:
                    stop = "generations"
                elif time_limit is not None and elapsed >= time_limit:
                    stop = "time_limit"
                elif target is not None and (best_so_far >= target if task.maximize
                                             else best_so_far <= target):
                    stop = "target_return"
                stop = dist.broadcast_object(stop, "agreeing on the stopping rule")  # rank 0's clock decides
                new = None
                with dist.agree("logging and varying the population"):
                    if main:
                        row = {"generation": g, **m, "best_so_far": best_so_far,
                               "mean_size": float(pop.lengths().float().mean()),
                               "total_env_steps": total_steps, "env_steps_per_s": steps / max(dt, 1e-9),
                               "generation_s": dt, "elapsed_s": elapsed}
                        mf.write(json.dumps(row) + "\n")
                        mf.flush()
                        tracker.log(row, step=g)
                        if bar is not None:
                            name = task.score_name
                            bar.set_postfix(best=f"{m.get(best_key, 0):.4g}",
                                            mean=f"{m.get(f'mean_{name}', 0):.4g}",
                                            size=f"{row['mean_size']:.1f}",
                                            sps=f"{row['env_steps_per_s']:.0f}", t=f"{elapsed:.0f}s")
                            bar.update(1)
                        new = gp.step(pop, fitness)
                pop = share(new)
                g += 1
    except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM
        checkpoint(snap)
        if bar is not None:
            bar.close()
        tracker.finish()
        task.close()
        if main:
            how = " by SIGTERM" if isinstance(err, Terminated) else ""
            print(f"\ninterrupted{how}: checkpoint written; continue with resume={run_dir}")
        raise SystemExit(_exit_code(err)) from None
    except BaseException:
        if bar is not None:
            bar.close()
        task.close()
        raise
    if bar is not None:
        bar.close()

    try:
        result = task.finish(pop, fitness, str(run_dir))  # every rank takes part (validation); rank 0 writes
        files = result.pop("files")
        summary = {"stopped_by": stop, "generations": g, "total_env_steps": total_steps,
                   f"best_train_{task.score_name}": best_so_far,
                   "elapsed_s": elapsed0 + time.perf_counter() - t0, **result, "run_dir": str(run_dir),
                   "wandb": {"id": tracker.run_id, "mode": tracker.mode,
                             "project": wcfg.get("project", "gprl"), "entity": wcfg.get("entity")},
                   "files": {k: os.path.basename(v) for k, v in files.items()},
                   **({"resume_changes": resume_changes} if resume_changes else {})}
        if not main:
            tracker.finish()
            task.close()
            dist.close()
            return summary
        rows = [json.loads(ln) for ln in metrics_path.read_text().splitlines() if ln.strip()]
        problem = cfg["env"]["name"] if uses_env(cfg) else cfg["dataset"].get("name") or cfg["task"]["name"]
        curve = plot_curve(rows, str(run_dir / "curve.png"), task.score_name, title=f"{problem}, seed {seed}")
        if curve:
            summary["files"]["curve"] = "curve.png"
            tracker.log_image(curve, "curve", step=max(g - 1, 0))
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        headline = ("validation_return",) if task.maximize else ("test_loss", "test_accuracy", "test_r2")
        tracker.log_formula(result.get("formulas", {}), step=g - 1,
                            **{k: result[k] for k in headline if k in result})
        tracker.summary({k: v for k, v in summary.items() if isinstance(v, (int, float, str))})
        tracker.log_artifact(task.artifact, task.artifact, list(files.values()))
        tracker.log_artifact("checkpoint", "checkpoint", [str(p) for p in list_checkpoints(run_dir)[-1:]])
        tracker.finish()
        task.close()
        dist.close()
        shown = ("stopped_by", "generations", "best_train_return", "best_train_loss", "validation_return",
                 "test_loss", "test_accuracy", "test_r2", "elapsed_s")
        print(json.dumps({k: summary[k] for k in shown if k in summary}))
        for name, formula in result.get("formulas", {}).items():
            print(f"{name} = {formula}")
        return summary
    except KeyboardInterrupt as err:  # the checkpoint of the last generation is on disk already
        tracker.finish()
        task.close()
        if main:
            print(f"\ninterrupted during validation/export: the checkpoint of generation {g} is intact; "
                  f"continue with resume={run_dir} to redo them")
        raise SystemExit(_exit_code(err)) from None
