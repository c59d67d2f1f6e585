"""The training run behind ``train.py`` (:class:`Run`): config → task → generations → checkpoints, metrics,
export, W&B.

The run is task-agnostic (:mod:`gprl.train.tasks`) and drives the one generation loop
(:class:`gprl.evolve.loop.Evolution`): per generation the task evaluates the population (one batched call),
the run logs a JSON line and a progress bar, the population is varied, and every ``checkpoint_every``
generations a checkpoint is written atomically. Everything random derives from ``seed`` and the generation
number, so a run killed and resumed (``resume=<run dir>``) ends bit-identical to an uninterrupted one on the
CPU.

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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from gprl import envs
from gprl.core.population import Population
from gprl.evolve import selection as S
from gprl.evolve.algorithm import GeneticProgramming
from gprl.evolve.config import GPConfig
from gprl.evolve.draws import Draws
from gprl.evolve.loop import Evolution, Generation
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
from gprl.train.rundir import RunDirectoryError, RunLock, WriteFailed, writing
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


# settings of policies whose environment sets none (configs/gp/default.yaml leaves them null)
POLICY_GP_DEFAULTS = {"max_len": 64, "max_depth": 8, "tournament_size": 5, "init_every_output": True,
                      "functions": ["add", "sub", "mul", "div", "tanh", "max", "min", "gt"],
                      "const_range": [-1.0, 1.0]}
POLICY_ENV_DEFAULTS = {"normalize_obs": True}


def same_target(mine: dict[str, Any], default: dict[str, Any]) -> bool:
    """Whether a mapping may be laid over a default one: a refinement of the tree's constants does not take a
    feedback refinement's settings (prune)."""
    return mine.get("target", "feedback") == default.get("target", "feedback")


def apply_backend_defaults(cfg: dict[str, Any]) -> dict[str, Any]:
    """Fill ``null`` entries of ``gp``/``env``/``task`` from ``env.per_backend[<resolved backend>]`` (a
    mapping given where the default is one is laid over it: ``task.refine={pairs: 32}`` keeps the default
    share), then from ``task.per_backend[<resolved backend>]``, then the settings still null from
    ``POLICY_GP_DEFAULTS`` and ``POLICY_ENV_DEFAULTS``."""
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
    # the preset's own defaults, then the policy task's for every task on this backend
    for defaults in (env_cfg.get("per_backend"), cfg["task"].get("per_backend")):
        defaults = (defaults or {}).get(backend) or {}
        for section in ("gp", "env", "task"):
            for key, value in (defaults.get(section) or {}).items():
                mine = cfg[section].get(key)
                if mine is None:
                    cfg[section][key] = value
                elif isinstance(mine, dict) and isinstance(value, dict) \
                        and (key != "refine" or same_target(mine, value)):
                    cfg[section][key] = {**value, **mine}
    for section, fallback in (("gp", POLICY_GP_DEFAULTS), ("env", POLICY_ENV_DEFAULTS)):
        for key, value in fallback.items():
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
    try:
        with writing(path):
            tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    except WriteFailed:
        tmp.unlink(missing_ok=True)  # the metrics file itself stays as it was
        raise
    os.replace(tmp, path)
    return rows


def run(cfg, run_dir: str | os.PathLike) -> dict[str, Any]:
    """Runs (or resumes) one training run; returns the summary also written to ``summary.json``.

    Under torchrun every rank calls this with the same configuration (see the module docstring). Ctrl-C and
    SIGTERM end it with exit status 130/143: during the generations after writing a checkpoint, during
    validation/export with the last one intact (both with the resume hint)."""
    with sigterm_as_interrupt():
        try:
            return Run(cfg, run_dir).execute()
        except KeyboardInterrupt as err:  # during set-up, or a second interrupt while handling the first
            if os.environ.get("RANK", "0") in ("", "0"):
                folder = Path(cfg.get("resume") or run_dir)
                hint = f": continue with resume={folder}" if list_checkpoints(folder) else ""
                print(f"\ninterrupted{hint}")
            raise SystemExit(_exit_code(err)) from None


class Run:
    """One training run in the order it happens: :meth:`set_up` (configuration, processes, checkpoint, task,
    run directory, search, tracker), :meth:`evolve` (the generations, :class:`gprl.evolve.loop.Evolution`),
    :meth:`finish` (validation, export, summary, W&B), and one :meth:`close` for every way it ends."""

    def __init__(self, cfg, run_dir: str | os.PathLike):
        self.cfg, self.run_dir = _plain(cfg), run_dir
        self.phase = "set-up"  # which interrupt message applies
        self.dist: distributed.Dist | None = None
        self.task: Task | None = None
        self.tracker: Tracker | None = None
        self.lock: RunLock | None = None
        self.bar = None

    def execute(self) -> dict[str, Any]:
        try:
            self.set_up()
            self.evolve()
            summary = self.finish()
        except KeyboardInterrupt as err:  # Ctrl-C or SIGTERM
            if self.phase == "evolve":
                self.checkpoint(self.snap)
            self.close("interrupted")
            if self.phase == "set-up":
                raise  # run() gives the resume hint, if a checkpoint exists
            if self.main:
                how = " by SIGTERM" if isinstance(err, Terminated) else ""
                print(f"\ninterrupted{how}: checkpoint written; continue with resume={self.run_dir}"
                      if self.phase == "evolve" else
                      f"\ninterrupted during refinement/validation/export: the checkpoint of generation "
                      f"{self.result.generation} is intact; continue with resume={self.run_dir} to redo them")
            raise SystemExit(_exit_code(err)) from None
        except WriteFailed as err:  # a full or read-only disk: what failed, what is intact, how to go on
            self.close("failed")
            raise RunDirectoryError(self.write_failure(err)) from err
        except BaseException:
            self.close("failed")
            raise
        try:
            self.close("done")
        except WriteFailed as err:  # W&B's files (written as the tracker finishes)
            raise RunDirectoryError(self.write_failure(err)) from err
        if self.main:
            shown = ("stopped_by", "generations", "best_train_return", "best_train_loss", "validation_return",
                     "test_loss", "test_accuracy", "test_r2", "elapsed_s")
            print(json.dumps({k: summary[k] for k in shown if k in summary}))
            for name, formula in summary.get("formulas", {}).items():
                print(f"{name} = {formula}")
        return summary

    # ---- set-up ----
    def set_up(self) -> None:
        self.check_config()
        self.start_processes()
        self.lock_run_directory()
        self.load_checkpoint()
        self.set_threads()
        with self.dist.agree("setting up the task"):
            self.task = make_task(self.cfg, self.dist)
        if uses_env(self.cfg):  # null: the environment's own limit and starts per tree, recorded with the run
            self.cfg["env"]["episode_length"] = self.task.final_length
            self.cfg["env"]["episodes"] = self.task.episodes
        self.write_run_directory()
        self.make_search()
        wcfg = self.cfg.get("wandb") or {}
        with writing(self.run_dir / "wandb"):
            self.tracker = Tracker(wcfg.get("mode", "offline") if self.main else "disabled", config=self.cfg,
                                   directory=str(self.run_dir), project=wcfg.get("project", "gprl"),
                                   entity=wcfg.get("entity"), group=wcfg.get("group"), tags=wcfg.get("tags"),
                                   name=wcfg.get("name"), run_id=self.wandb_id)
        if self.cfg.get("progress", True) and self.main:
            from tqdm import tqdm

            self.bar = tqdm(total=self.gp_cfg.get("generations"), initial=self.start, unit="gen",
                            dynamic_ncols=True)

    def check_config(self) -> None:
        cfg = self.cfg
        # the schema holds both sections; a run keeps only the one its task reads (config.yaml, W&B,
        # fingerprint)
        cfg.pop("dataset" if uses_env(cfg) else "env", None)
        apply_backend_defaults(cfg)
        gp_cfg = self.gp_cfg = cfg["gp"]
        _check_positive("gp.population_size", gp_cfg.get("population_size"), allow_none=False)
        _check_positive("gp.generations", gp_cfg.get("generations"))
        _check_positive("gp.time_limit", gp_cfg.get("time_limit"))
        if gp_cfg.get("generations") is None and gp_cfg.get("time_limit") is None:
            raise ValueError("set gp.generations or gp.time_limit (or both): the run needs a stopping rule")
        self.draws = Draws.from_config(gp_cfg)
        self.every = int(cfg.get("checkpoint_every", 5))
        if self.every < 1:
            raise ValueError(f"checkpoint_every must be >= 1, got {self.every}")
        self.pop_size = pop_size = int(gp_cfg["population_size"])
        islands = gp_cfg["islands"]  # its own range is GeneticProgramming's check
        if isinstance(islands, int) and islands >= 1 and pop_size % islands:
            raise ValueError(f"gp.population_size ({pop_size}) must be a multiple of gp.islands "
                             f"({islands}); change one of them")

    def start_processes(self) -> None:
        cfg = self.cfg
        self.dist = dist = distributed.init(cfg)  # world size 1 (every collective a no-op) without torchrun
        if (cfg.get("dist") or {}).get("shard", "population") == "population" or uses_env(cfg):
            dist.check_shardable(self.pop_size, "gp.population_size", "individual")
        # rank 0's run directory is the run's (the others' Hydra directories are scratch; they write nothing)
        self.run_dir = run_dir = Path(dist.broadcast_object(str(cfg.get("resume") or self.run_dir)))
        dist.hint = (f" Checkpoints already written under {run_dir}/checkpoints are intact: continue with "
                     f"resume={run_dir} (with any number of processes).")
        self.main = dist.is_main

    def lock_run_directory(self) -> None:
        """Rank 0 (the one process that writes it) takes the run directory's lock: a second run into it, or
        a resume of it while another process writes it, stops here naming the holder."""
        with self.dist.agree("locking the run directory"):
            if self.main:
                if not self.cfg.get("resume"):
                    with writing(self.run_dir):
                        self.run_dir.mkdir(parents=True, exist_ok=True)
                if self.run_dir.is_dir():  # a resume of a missing directory: load_checkpoint names it
                    self.lock = RunLock(self.run_dir)
                    self.lock.acquire()

    def load_checkpoint(self) -> None:
        self.state, self.damaged = None, []
        if self.cfg.get("resume"):
            with self.dist.agree("loading the checkpoint"):
                # raises before anything is written
                state = load_checkpoint(self.run_dir, self.damaged) if self.main else None
            self.state = self.dist.broadcast_object(state, "sharing the checkpoint")

    def set_threads(self) -> None:
        cfg = self.cfg
        threads = cfg.get("threads", "auto")
        if threads == "auto":
            # MuJoCo's own threads use the cores; torch's OpenMP pool would only contend with them
            if uses_env(cfg) and resolve_backend(cfg["env"]) in ("mujoco", "gymnasium") \
                    and cfg.get("device", "auto") in ("auto", "cpu"):
                torch.set_num_threads(1)
        elif threads:
            torch.set_num_threads(int(threads))

    def write_run_directory(self) -> None:
        """Checks a resumed run against its checkpoint, then (rank 0) writes the configuration and the
        banner."""
        cfg, state, run_dir, task = self.cfg, self.state, self.run_dir, self.task
        self.fingerprint = {**task.fingerprint(), "population_size": self.pop_size,
                            "max_len": int(self.gp_cfg["max_len"])}
        # stored in every checkpoint: a resume changes it only on purpose
        self.search_settings = search_config(cfg)
        changes: dict[str, dict[str, Any]] = {}
        if state is not None:  # the same checks on every rank
            check_fingerprint(state["fingerprint"], self.fingerprint, run_dir)
            changes = check_config(state.get("config"), self.search_settings, run_dir,
                                   bool(cfg.get("resume_allow_changes")))
            run_gp = (state.get("config") or {}).get("gp")
            if run_gp is not None:  # more draws while they last; never a draw's generations moved
                self.draws.check_resume(Draws.from_config(run_gp), int(state["generation"]))
        self.changes = changes
        with self.dist.agree("writing the run directory"):
            if self.main:
                run_dir.mkdir(parents=True, exist_ok=True)
                for path in self.damaged:  # set aside: neither tried again nor counted by keep_checkpoints
                    path.replace(path.with_name(path.name + ".damaged"))
                from omegaconf import OmegaConf

                name = "config.yaml" if state is None else "config_resume.yaml"
                with writing(run_dir / name):
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

    def make_search(self) -> None:
        """The GP and its first population: a fresh one, or the checkpoint's with every counter."""
        state, task = self.state, self.task
        self.gp = gp = make_gp(self.gp_cfg, task, int(self.cfg["seed"]))
        self.metrics_path = self.run_dir / "metrics.jsonl"
        if state is None:
            self.population = self.share(gp.init() if self.main else None)
            self.start, elapsed_before, last_before, self.total_steps, self.wandb_id = 0, 0.0, 0.0, 0, None
            self.kept = None  # gp.draws: the best ended draw so far (population, fitness, the task's state)
            self.continued = None  # gp.draws: the draw that went on (0-based) once the draws are over
            self.best_so_far = -math.inf if task.maximize else math.inf
            self.resume_changes: list[dict[str, Any]] = []
            if self.main:
                with writing(self.metrics_path):
                    self.metrics_path.write_text("")
        else:
            set_rng_states(state["rng"])
            self.population = population_from_state(state["population"], gp.device)
            gp.generation = self.start = int(state["generation"])
            gp.archive.loss = state["archive_loss"].to(gp.device)
            gp.archive.trees = population_from_state(state["archive_trees"], gp.device)
            task.load_state_dict(state["task"])
            elapsed_before, self.total_steps = state["elapsed"], state["total_env_steps"]
            last_before = state.get("last_generation_s", 0.0)
            # older checkpoints: (the retired gp.restarts' run index, fresh_at)
            gp.fresh_at = state.get("fresh_at", state.get("restart", (0, 0))[1])
            self.kept, self.continued = state.get("draws"), state.get("draw_continued")
            self.best_so_far, self.wandb_id = state["best_so_far"], state.get("wandb_id")
            # every continuation with changed settings, in order (the run's record of them)
            self.resume_changes = [*state.get("resume_changes", []),
                                   *([{"generation": self.start, "changes": self.changes}]
                                     if self.changes else [])]
            if self.main:
                _truncate_metrics(self.metrics_path, self.start)
        limit = self.gp_cfg.get("time_limit")
        # task.refine's share of the time limit comes after the generations (refine_seconds)
        self.search = Evolution([gp], task.evaluate, generations=self.gp_cfg.get("generations"),
                                time_limit=limit and limit * (1 - task.refine_share),
                                elapsed_before=elapsed_before, last_before=last_before,
                                stopped="target_return" if self.target_reached() else "",
                                step=self.vary, agree=self.agree_on_stop)

    def share(self, population: Population | None) -> Population:
        """Rank 0's population on every rank (rank 0 varies, every rank evaluates)."""
        return self.dist.broadcast_population(population, size=self.pop_size, n_in=self.task.n_in,
                                              n_out=self.task.n_out, max_len=int(self.gp_cfg["max_len"]),
                                              device=self.gp.device)

    # ---- the generations ----
    def evolve(self) -> None:
        self.snap = self.snapshot(self.start)
        self.phase = "evolve"
        with writing(self.metrics_path):  # the opening only: a failure in the generations names its own file
            self.metrics_file = open(self.metrics_path if self.main else os.devnull, "a")  # noqa: SIM115
        with self.metrics_file:
            self.result = self.search.run([self.population], start=self.start, report=self.log_generation,
                                          before=self.before_generation)
        if self.bar is not None:
            self.bar.close()

    def before_generation(self, generation: int, populations: list[Population], stop: str) -> None:
        """Keeps the state before evaluating ``generation`` (what Ctrl-C saves); writes it as a checkpoint
        every ``checkpoint_every`` generations and at the end."""
        self.population, self.generation = populations[0], generation
        self.snap = self.snapshot(generation)
        if stop or (generation > self.start and generation % self.every == 0):
            with self.dist.agree("writing a checkpoint"):
                self.checkpoint(self.snap)

    def log_generation(self, generation: Generation) -> str:
        """Counts, logs (metrics line, W&B, progress bar) and returns "target_return" once
        ``gp.target_return`` is reached."""
        task, g, m = self.task, generation.number, generation.metrics
        fitness = generation.fitness[0]
        steps = int(m.get("env_steps", 0))
        self.total_steps += steps
        best_key = f"best_{task.score_name}"  # best_return (policies) or best_loss (lower is better)
        best = float(m.get(best_key, fitness.max() if task.maximize else fitness.min()))
        self.best_so_far = max(self.best_so_far, best) if task.maximize else min(self.best_so_far, best)
        reached = self.target_reached()
        with self.dist.agree("logging the generation"):
            if self.main:
                dt, elapsed = generation.evaluation_s, generation.elapsed_s
                row = {"generation": g, **m, "best_so_far": self.best_so_far,
                       "mean_size": float(generation.populations[0].lengths().float().mean()),
                       "total_env_steps": self.total_steps, "env_steps_per_s": steps / max(dt, 1e-9),
                       "generation_s": dt, "elapsed_s": elapsed}
                if self.gp.islands > 1:  # each island's best fitness: which of the searches leads
                    loss = S.loss_of(fitness, task.maximize).view(self.gp.islands, -1).min(1).values
                    row["island_best_fitness"] = [-x if task.maximize else x for x in loss.tolist()]
                draw = self.draws.index(g)
                draw = self.continued if draw is None else draw
                if draw is not None:  # gp.draws: which draw the generation belongs to, from 1
                    row["draw"] = draw + 1
                with writing(self.metrics_path):
                    self.metrics_file.write(json.dumps(row) + "\n")
                    self.metrics_file.flush()
                self.tracker.log(row, step=g)
                if self.bar is not None:
                    name = task.score_name
                    self.bar.set_postfix(best=f"{m.get(best_key, 0):.4g}",
                                         mean=f"{m.get(f'mean_{name}', 0):.4g}",
                                         size=f"{row['mean_size']:.1f}",
                                         sps=f"{row['env_steps_per_s']:.0f}", t=f"{elapsed:.0f}s")
                    self.bar.update(1)
        return "target_return" if reached else ""

    def target_reached(self) -> bool:
        """Whether the best score so far reached ``gp.target_return``."""
        target = self.gp_cfg.get("target_return")
        return target is not None and (self.best_so_far >= target if self.task.maximize
                                       else self.best_so_far <= target)

    def agree_on_stop(self, stop: str) -> str:
        return self.dist.broadcast_object(stop, "agreeing on the stopping rule")  # rank 0's clock decides

    def vary(self, gp: GeneticProgramming, population: Population, fitness: torch.Tensor) -> Population:
        new, fresh = None, False
        draw = self.draws.ends(self.generation)
        if draw is not None:
            population, fitness, fresh = self.end_draw(draw, population, fitness)
        with self.dist.agree("varying the population"):
            if self.main:
                new = gp.restart(population, fitness) if fresh else gp.step(population, fitness)
        return self.share(new)

    def end_draw(self, draw: int, population: Population,
                 fitness: torch.Tensor) -> tuple[Population, torch.Tensor, bool]:
        """``gp.draws`` (every rank, the same fitness): keeps the draw ``population`` ends where its best
        score leads; after the last draw the kept one goes on. Returns what to vary, and whether a fresh
        draw starts from it."""
        task, maximize = self.task, self.task.maximize
        loss = float(S.loss_of(fitness, maximize).min())  # NaN and the direction sanitised
        kept = self.kept
        if kept is None or loss < kept["loss"]:
            kept = self.kept = {"draw": draw, "loss": loss, "fitness": fitness.cpu(),
                                "population": population_state(population), "task": task.draw_state()}
        if draw < self.draws.count - 1:
            if draw == 0 and self.main and (note := self.draws.budget_note(
                    self.search.elapsed(), self.search.time_limit, self.gp_cfg.get("time_limit"))):
                print(note, flush=True)
            task.start_draw(None)
            return population, fitness, True
        self.kept, self.continued = None, kept["draw"]
        if self.main:
            best = -kept["loss"] if maximize else kept["loss"]
            print(f"gprl: draw {kept['draw'] + 1} of {self.draws.count} goes on (its last generation's best "
                  f"fitness {best:.6g})", flush=True)
            if kept["draw"] != draw:
                self.gp.archive.update(population, S.loss_of(fitness, maximize))
            if self.draws.generations == 1:  # the kept population is a fresh one: no strategy pairs
                self.gp.fresh_at = self.gp.generation
        task.start_draw(kept["task"])
        return (population_from_state(kept["population"], fitness.device),
                kept["fitness"].to(fitness.device), False)

    def snapshot(self, generation: int) -> dict[str, Any] | None:
        """The consistent state *before* evaluating ``generation`` (rank 0; None elsewhere)."""
        if not self.main:
            return None
        return {"generation": generation, "fingerprint": self.fingerprint, "config": self.search_settings,
                "resume_changes": self.resume_changes,
                "population": {k: v.clone() if torch.is_tensor(v) else v
                               for k, v in population_state(self.population).items()},
                "archive_loss": self.gp.archive.loss.cpu().clone(),
                "archive_trees": population_state(self.gp.archive.trees),
                "task": self.task.state_dict(), "elapsed": self.search.elapsed(),
                "last_generation_s": self.search.last_s,
                "total_env_steps": self.total_steps, "best_so_far": self.best_so_far,
                "fresh_at": self.gp.fresh_at, "draws": self.kept,
                "draw_continued": self.continued,
                "wandb_id": self.tracker.run_id}

    def checkpoint(self, snap: dict[str, Any] | None) -> None:
        if snap is not None:
            save_checkpoint(self.run_dir, snap["generation"],
                            {k: v for k, v in snap.items() if k != "generation"},
                            keep=int(self.cfg.get("keep_checkpoints", 2)))

    # ---- the finish ----
    def finish(self) -> dict[str, Any]:
        """Refinement (``task.refine``), validation and export (every rank takes part; rank 0 writes), the
        summary, the curve and W&B."""
        self.phase = "finish"
        cfg, task, tracker, result, run_dir = self.cfg, self.task, self.tracker, self.result, self.run_dir
        g = result.generation
        fitness = None if result.fitness is None else result.fitness[0]
        refined = task.refine(self.refine_seconds())
        with writing(f"the exported files in {run_dir}"):
            exported = task.finish(result.populations[0], fitness, str(run_dir))
        files = exported.pop("files")
        wcfg = cfg.get("wandb") or {}
        summary = {"stopped_by": result.stopped_by, "generations": g, "total_env_steps": self.total_steps,
                   f"best_train_{task.score_name}": self.best_so_far, "elapsed_s": self.search.elapsed(),
                   **refined, **exported, "run_dir": str(run_dir),
                   "wandb": {"id": tracker.run_id, "mode": tracker.mode,
                             "project": wcfg.get("project", "gprl"), "entity": wcfg.get("entity")},
                   "files": {k: os.path.basename(v) for k, v in files.items()},
                   **({"resume_changes": self.resume_changes} if self.resume_changes else {})}
        if not self.main:
            return summary
        rows = [json.loads(ln) for ln in self.metrics_path.read_text().splitlines() if ln.strip()]
        problem = cfg["env"]["name"] if uses_env(cfg) else cfg["dataset"].get("name") or cfg["task"]["name"]
        with writing(run_dir / "curve.png"):
            curve = plot_curve(rows, str(run_dir / "curve.png"), task.score_name,
                               title=f"{problem}, seed {int(cfg['seed'])}")
        if curve:
            summary["files"]["curve"] = "curve.png"
            tracker.log_image(curve, "curve", step=max(g - 1, 0))
        with writing(run_dir / "summary.json"):
            (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
        headline = ("validation_return",) if task.maximize else ("test_loss", "test_accuracy", "test_r2")
        with writing(run_dir / "wandb"):
            tracker.log_formula(exported.get("formulas", {}), step=g - 1,
                                **{k: exported[k] for k in headline if k in exported})
            tracker.summary({k: v for k, v in summary.items() if isinstance(v, (int, float, str))})
            tracker.log_artifact(task.artifact, task.artifact, list(files.values()))
            tracker.log_artifact("checkpoint", "checkpoint",
                                 [str(p) for p in list_checkpoints(run_dir)[-1:]])
        return summary

    def write_failure(self, err: WriteFailed) -> str:
        """One line: what could not be written, the newest checkpoint (written whole or not at all, so
        complete) and the command that continues from it."""
        kept = list_checkpoints(self.run_dir)
        if not kept:
            return (f"{err}. No checkpoint was written yet: start the run again once the disk has space (or "
                    "is writable)")
        return (f"{err}. The checkpoint {kept[-1]} is complete: once the disk has space again (or is "
                f"writable), continue with: python train.py resume={self.run_dir}")

    def refine_seconds(self) -> float | None:
        """The refinement's time (``task.refine.share``): ``share / (1 - share)`` of the evolution's, so the
        last share of ``gp.time_limit`` where that ended it, less where generations or a target did; None
        without a share (its iterations alone)."""
        share, evolved = self.task.refine_share, self.search.elapsed()
        if not share:
            return None
        limit = self.gp_cfg.get("time_limit")
        seconds = evolved * share / (1 - share)
        return seconds if limit is None else min(seconds, limit - evolved)

    def close(self, outcome: str) -> None:
        """The teardown for every way a run ends (``outcome``: "done", "interrupted" or "failed"). After a
        failure W&B marks its run as crashed at exit, so it is not finished here; the process group ends only
        after a completed run (on an interrupt or failure other ranks may still be inside a collective)."""
        if self.bar is not None:
            self.bar.close()
        try:
            if self.tracker is not None and outcome != "failed":
                with writing(Path(self.run_dir) / "wandb"):
                    self.tracker.finish()
        finally:
            if self.task is not None:
                self.task.close()
            if self.lock is not None:
                self.lock.release()
            if outcome == "done":
                self.dist.close()
