"""Policy quality within a wall-clock budget: ``train.py`` on the locomotion tasks, then the exported policies
replayed on fresh episodes; one JSON document and one PNG per backend.

For each task (``--tasks``: swimmer, hopper, walker2d, halfcheetah) and seed (``--seeds``) it runs

    python train.py env=<task> env.backend=<backend> seed=<seed> gp.time_limit=<budget> wandb.mode=disabled
                    progress=false hydra.run.dir=<out>/<backend>/<task>/seed<seed> [overrides after --]

as a subprocess and measures:

* ``wall_s``: the process's wall-clock from its start to its exit (imports, JAX compilation, evolution,
  validation of the hall of fame and export included); ``--budget`` bounds the evolution only (the trainer
  stops where one more generation, as long as the last, would end past it).
* ``curve``: per generation, the best training return so far against the process's wall-clock (when the
  generation's line of ``metrics.jsonl`` appeared, polled every 0.1 s) and the trainer's own clock
  (``elapsed_s``). Training returns are over that generation's episode length (the per-backend schedules
  start short), so early points are not comparable with full-length returns.
* ``eval``: the exported policy on ``--episodes`` fresh full-length episodes (the run's final episode
  length), starting from seeds no training or validation episode uses (``--eval-seed`` + e). MuJoCo runs:
  ``policy.py`` in Gymnasium's v5 environments (``scripts/replay.py``); Brax runs: the tree of
  ``policy.json`` with its normalisation and action map through ``gprl.envs`` and ``gprl.rl.policy`` on Brax.
* ``nodes``: per action, the sympy nodes (``preorder_traversal``) of the simplified formula that
  ``policy.txt`` shows, rebuilt from the exported tree by the export's own functions; ``tree_length`` is
  the tree's node count before simplification.

The PNG draws the best training return against wall-clock, one subplot per task, with the exported policies'
evaluation (mean ± std) at their runs' ends and EvoGP's Table VIII returns (population 5,000, Brax's
generalized pipeline, 1000-step episodes) as horizontal reference lines.

    python scripts/bench_policies.py --backend mujoco --budget 600 --out outputs/bench_policies
    python scripts/bench_policies.py --backend brax --tasks hopper swimmer --seeds 0 1 \
        -- gp.population_size=8192

``--suite dev`` runs the development suite (:data:`SUITES`: classic control, Box2D and MuJoCo tasks, each
with its CPU budget and target, three seeds, 20 fresh episodes in plain Gymnasium); ``--suite dev_brax``
its Brax tasks with the defaults on a GPU. The document's ``summary`` gives per task the mean over seeds,
the worst seed and whether the mean reaches the target, how many exported actions are constants, and the
median formula size per action over the suite; the PNG draws the targets, the mean and the worst seed.

    python scripts/bench_policies.py --suite dev --out outputs/dev_suite
    python scripts/bench_policies.py --suite dev --tasks Pendulum-v1 --seeds 0 --budget 60

``--resume`` continues the runs of an earlier document in ``--out`` from their last checkpoints
(``train.py resume=<run dir>``; pass the same overrides after ``--``) until ``--budget`` seconds of evolution
in all (the trainer's clock goes on from the checkpoint's): ``wall_s`` is the sum of the processes'
wall-clocks (``segments_wall_s``), and the curve keeps the earlier points the continuation did not redo.
The document is written every few seconds while a run trains (its record marked ``running``), once the runs
have trained and again after their replays: a run cut off with its machine, or a replay cut short, leaves
runs that ``--resume`` continues, the time they ran counted.

``--merge FILE ...`` runs nothing: it gathers the records of earlier documents (also of the runs side by side
in ``scripts/dev/gpu_policy_grid.sh``'s grid.json, and the peer runs of ``bench_evogp_policies.py``, drawn
dashed) into one JSON document and PNG per backend in ``--out``; runs of one development suite (its seeds
run side by side, say) get its targets and ``summary``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TASKS = ("swimmer", "hopper", "walker2d", "halfcheetah")
# The development suites: task -> (seconds of evolution, None: the defaults' own; the target of the exported
# policy's mean return over seeds). dev: a 2-core CPU, 20 fresh episodes, 3 seeds; the locomotion tasks'
# targets are their seed-0 figures with the per-task settings the presets carried (CPU: native MuJoCo).
# dev_brax: an NVIDIA GPU, the defaults (about 600 s from the process's start), 10 fresh episodes, one seed.
SUITES: dict[str, dict[str, tuple[float | None, float]]] = {
    "dev": {"CartPole-v1": (60, 500), "Pendulum-v1": (300, -160), "LunarLanderContinuous-v3": (600, 250),
            "InvertedDoublePendulum-v5": (300, 9300), "Reacher-v5": (300, -5), "Ant-v5": (900, 2500),
            "hopper": (750, 3009), "walker2d": (750, 3807), "halfcheetah": (750, 4508),
            "swimmer": (600, 361)},
    "dev_brax": {"ant": (None, 3000), "hopper": (None, 3336), "walker2d": (None, 2548),
                 "halfcheetah": (None, 8499), "swimmer": (None, 370)},
}
SUITE_RUNS = {"dev": {"backend": "auto", "episodes": 20, "seeds": [0, 1, 2]},
              "dev_brax": {"backend": "brax", "episodes": 10, "seeds": [0]}}
# EvoGP (Table VIII): best returns with population 5,000 on Brax's generalized pipeline, 1000-step episodes
EVOGP_TABLE_VIII = {"swimmer": 372.0, "hopper": 2659.0, "walker2d": 2365.0, "halfcheetah": 13863.0}
EVAL_SEED = 10_000_019  # as scripts/replay.py: fresh episodes, not those training and validation play
SAVE_EVERY_S = 5.0  # the document while a run trains: a run cut off loses at most this much of its clock
STOP_GRACE_S = 60.0  # after Ctrl-C, for the run to write its checkpoint and exit before it gets SIGTERM


# ---------------------------------------------------------------- one training run
def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The complete lines of ``metrics.jsonl`` (a line still being written is read next time)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in data[:data.rfind(b"\n") + 1].splitlines() if line.strip()]


def holds_files(run_dir: Path) -> bool:
    return run_dir.exists() and any(run_dir.iterdir())


def train(task: str, backend: str, seed: int, budget: float | None, run_dir: Path, overrides: list[str],
          earlier: dict[str, Any] | None = None,
          save: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Runs train.py and returns the run's record (without the evaluation); with ``earlier`` (the record of
    the run so far) it continues the run from its last checkpoint. ``save`` receives the record so far
    (``running``: true) every ``SAVE_EVERY_S`` seconds while the run trains."""
    cmd = [sys.executable, "train.py", f"env={task}", f"env.backend={backend}", f"seed={seed}",
           *([f"gp.time_limit={budget:g}"] if budget is not None else []), "wandb.mode=disabled",
           "progress=false", f"hydra.run.dir={run_dir}",
           *([f"resume={run_dir}"] if earlier else []), *overrides]
    log_path = run_dir.with_suffix(".log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path = run_dir / "metrics.jsonl"
    before = earlier["wall_s"] if earlier else 0.0
    # generation -> point; a row whose trainer clock differs from the stored point's is new (or redone after
    # the checkpoint a continuation starts from) and gets this moment's wall-clock
    points = {p["generation"]: p for p in (earlier or {}).get("curve", [])}

    def so_far(wall: float, returncode: int | None) -> dict[str, Any]:
        final = {r["generation"] for r in read_metrics(metrics_path)}  # a continuation redoes the rest
        record: dict[str, Any] = {
            "task": task, "backend": backend, "seed": seed, "budget_s": budget, "wall_s": before + wall,
            "returncode": returncode, "run_dir": str(run_dir), "log": str(log_path),
            "command": " ".join(cmd[1:]), "evogp_table_viii": EVOGP_TABLE_VIII.get(task),
            "curve": [points[g] for g in sorted(points) if g in final]}
        if earlier:
            record["segments_wall_s"] = earlier.get("segments_wall_s", [earlier["wall_s"]]) + [wall]
        return record

    with open(log_path, "a" if earlier else "w") as log:
        start = saved = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            while True:
                done = proc.poll() is not None
                now = before + time.perf_counter() - start
                for r in read_metrics(metrics_path):
                    p = points.get(r["generation"])
                    if p is None or p["elapsed_s"] != r["elapsed_s"]:
                        points[r["generation"]] = {
                            "generation": r["generation"], "wall_s": now, "elapsed_s": r["elapsed_s"],
                            "best_return": r["best_return"], "best_so_far": r["best_so_far"],
                            "episode_length": r.get("episode_length")}
                if done:
                    break
                if save is not None and time.perf_counter() - saved >= SAVE_EVERY_S:
                    saved = time.perf_counter()
                    save({**so_far(saved - start, None), "running": True})
                time.sleep(0.1)
        except BaseException as err:
            if isinstance(err, KeyboardInterrupt):  # Ctrl-C reached the run too: it checkpoints and exits
                try:
                    proc.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
            if proc.poll() is None:
                proc.terminate()  # it checkpoints on SIGTERM as well
                proc.wait()
            raise
        wall = time.perf_counter() - start
    record = so_far(wall, proc.returncode)
    curve = record.pop("curve")
    if proc.returncode != 0:
        record["error"] = log_path.read_text()[-2000:]
    summary_path = run_dir / "summary.json"
    if summary_path.exists():
        s = json.loads(summary_path.read_text())
        keys = ("stopped_by", "generations", "total_env_steps", "best_train_return", "validation_return",
                "tree_length", "elapsed_s")
        refine = ("refine_iterations", "refine_s", "refine_weights", "refine_constants",
                  "refined_validation_return", "unrefined_validation_return")
        record.update({k: s.get(k) for k in keys})
        record.update({k: s[k] for k in refine if k in s})  # task.refine's report
        record["evolution_s"] = curve[-1]["elapsed_s"] if curve else None  # trainer clock, last generation
    config_path = run_dir / "config.yaml"
    if config_path.exists():
        from omegaconf import OmegaConf

        cfg = OmegaConf.load(config_path)
        record["population_size"] = cfg.gp.population_size
        record["budget_s"] = record["budget_s"] if budget is not None else cfg.gp.time_limit
        record["resolved_backend"] = cfg.env.backend
        record["episode_length"] = cfg.env.episode_length
        sched = cfg.env.episode_schedule
        record["episode_schedule"] = None if sched is None else OmegaConf.to_container(sched)
        record["digits"] = cfg.task.get("digits", 4)  # the export's significant digits
    record["curve"] = curve
    return record


# ---------------------------------------------------------------- the exported policy
def load_replay() -> Any:
    spec = importlib.util.spec_from_file_location("gprl_replay", ROOT / "scripts" / "replay.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def evaluate_gymnasium(run_dir: Path, episodes: int, seed: int) -> dict[str, Any]:
    """``policy.py`` in Gymnasium's v5 environment, as ``scripts/replay.py`` plays it."""
    replay = load_replay()
    policy = replay.load_policy(run_dir)
    meta = json.loads(policy.META)
    length = int(meta["episode_length"])
    returns = replay.replay_gymnasium(policy, meta, episodes, seed, length)
    return {"simulator": "gymnasium", "episode_length": length, "returns": returns}


def evaluate_brax(run_dir: Path, episodes: int, seed: int) -> dict[str, Any]:
    """The tree of ``policy.json`` on fresh Brax episodes, played as the trainer's validation plays them."""
    import gprl.envs as genvs
    import torch

    from gprl.core.formulas import tree_from_record
    from gprl.rl.policy import ActionMap, evaluate_policies

    record = json.loads((run_dir / "policy.json").read_text())
    meta = record["meta"]
    length = int(meta["episode_length"])
    env = genvs.make(meta["env"], backend="brax", num_envs=episodes, seed=seed, episode_length=length,
                     **(meta.get("env_kwargs") or {}))
    try:
        action_map = ActionMap.for_env(env, record["action"]["transform"])
        mean = torch.tensor(record["normalization"]["mean"], dtype=torch.float32)
        std = torch.tensor(record["normalization"]["std"], dtype=torch.float32)
        tree = tree_from_record(record["tree"]).to(env.device)
        ev = evaluate_policies(tree, env, action_map, mean, std, episodes, length, seed=seed)
    finally:
        env.close()
    return {"simulator": "brax", "episode_length": length, "returns": ev.episode_returns[0].tolist()}


def formula_nodes(run_dir: Path, digits: int) -> dict[str, Any]:
    """Sympy nodes per action of the simplified formulas (``policy.txt``), rebuilt from ``policy.json``."""
    import sympy

    from gprl.core.formulas import readable, tree_from_record
    from gprl.rl.export import policy_expressions

    record = json.loads((run_dir / "policy.json").read_text())
    act, norm = record["action"], record["normalization"]
    exprs = policy_expressions(tree_from_record(record["tree"]), norm["mean"], norm["std"], act["transform"],
                               act["low"], act["high"], record["obs_names"])
    forms = [readable(e, digits) for e in exprs]
    nodes = {a: sum(1 for _ in sympy.preorder_traversal(e)) for a, e in zip(record["action_names"], forms)}
    same = all(str(e) == record["formulas"].get(a) for a, e in zip(record["action_names"], forms))
    return {"nodes": nodes, "nodes_total": sum(nodes.values()), "formulas": record["formulas"],
            "formulas_match_export": same}


def mean_std(returns: list[float]) -> tuple[float, float]:
    """Mean and population standard deviation of the episodes' returns."""
    mean = sum(returns) / len(returns)
    return mean, math.sqrt(sum((x - mean) ** 2 for x in returns) / len(returns))


def evaluate(record: dict[str, Any], episodes: int, seed: int) -> None:
    run_dir = Path(record["run_dir"])
    if not (run_dir / "policy.json").exists():
        record["eval_error"] = "no exported policy (the run failed before the export)"
        return
    try:
        fn = evaluate_brax if record.get("resolved_backend", record["backend"]) == "brax" \
            else evaluate_gymnasium
        ev = fn(run_dir, episodes, seed)
        mean, std = mean_std(ev["returns"])
        record["eval"] = {**ev, "episodes": episodes, "seed": seed, "mean": mean, "std": std}
        record.update(formula_nodes(run_dir, int(record.get("digits") or 4)))
    except Exception as exc:  # noqa: BLE001  report it and go on with the other runs
        record["eval_error"] = f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------- figure
def plot(records: list[dict[str, Any]], tasks: list[str], backend: str, budget: str, path: Path,
         targets: dict[str, float] | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(len(tasks), 2)
    rows = math.ceil(len(tasks) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 4 * rows), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        for k, rec in enumerate(r for r in records if r["task"] == task):
            color, name = f"C{k}", rec.get("label") or f"seed {rec['seed']}"
            pts = rec.get("curve") or []
            if pts:
                # held until the process ends (validation and export come after the last generation)
                xs, ys = [p["wall_s"] for p in pts] + [rec["wall_s"]], [p["best_so_far"] for p in pts]
                ax.step(xs, ys + ys[-1:], where="post", color=color, ls="--" if rec.get("peer") else "-",
                        label=f"{name}: best training return")
            if "eval" in rec:
                ev = rec["eval"]
                ax.errorbar([rec["wall_s"]], [ev["mean"]], yerr=[ev["std"]], fmt="o", color=color, capsize=3,
                            label=f"{name}: exported policy, {ev['episodes']} fresh episodes")
        evals = [(r["wall_s"], r["eval"]["mean"]) for r in records if r["task"] == task and "eval" in r]
        if len(evals) > 1:  # the suite's statistics: the mean over seeds and the worst seed
            mean = sum(m for _, m in evals) / len(evals)
            ax.axhline(mean, color="C3", lw=2, alpha=0.6, label=f"mean over {len(evals)} seeds: {mean:,.1f}")
            ax.axhline(min(m for _, m in evals), color="C3", lw=1, ls=":",
                       label=f"worst seed: {min(m for _, m in evals):,.1f}")
        if targets and task in targets:
            ax.axhline(targets[task], color="k", ls="-.", lw=1, label=f"target: {targets[task]:,.0f}")
        if task in EVOGP_TABLE_VIII and backend == "brax":
            ax.axhline(EVOGP_TABLE_VIII[task], color="k", ls="--", lw=1,
                       label=f"EvoGP Table VIII: {EVOGP_TABLE_VIII[task]:,.0f}")
        ax.set_title(f"{task} ({backend})")
        ax.set_xlabel("wall-clock of the training process (s)")
        ax.set_ylabel("return")
        ax.grid(alpha=0.3)
        ax.set_xlim(left=0)
    for ax in list(axes.flat)[len(tasks):]:
        ax.axis("off")
    fig.suptitle(f"gprl, {budget}" + ("; EvoGP: population 5,000, Brax generalized, 1000-step episodes"
                                      if backend == "brax" else ""), fontsize=9)
    fig.tight_layout()
    for ax in list(axes.flat)[:len(tasks)]:  # after the layout: a long legend goes below its curves
        if len(ax.get_legend_handles_labels()[1]) > 8:
            ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.15))
        else:
            ax.legend(fontsize=7, loc="best")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def suite_summary(records: list[dict[str, Any]], targets: dict[str, float]) -> dict[str, Any]:
    """Per task: the exported policies' mean return over seeds and the worst seed against the target, and
    the median formula size per action over the suite."""
    tasks, sizes = {}, []
    for task, target in targets.items():
        runs = [r for r in records if r["task"] == task and "eval" in r]
        sizes += [n for r in runs for n in r.get("nodes", {}).values()]
        means = [r["eval"]["mean"] for r in runs]
        tasks[task] = {"target": target, "seeds": [r["seed"] for r in runs], "returns": means,
                       "mean": sum(means) / len(means) if means else None, "worst": min(means, default=None),
                       "met": bool(means) and sum(means) / len(means) >= target,
                       "wall_s": [r["wall_s"] for r in runs],
                       "constant_actions": sum(sum(1 for f in r.get("formulas", {}).values()
                                                   if _is_number(f)) for r in runs),
                       "actions": sum(len(r.get("formulas", {})) for r in runs)}
    sizes.sort()
    median = sizes[len(sizes) // 2] if sizes else None
    return {"tasks": tasks, "median_nodes_per_action": median, "met": sum(t["met"] for t in tasks.values())}


def _is_number(formula: str) -> bool:
    try:
        float(formula)
        return True
    except ValueError:
        return False


# ---------------------------------------------------------------- merging earlier documents
def peer_document(doc: dict[str, Any]) -> dict[str, Any]:
    """A peer's run (``bench_evogp_policies.py``'s document) as a document of one record of this script's."""
    s = doc["settings"]
    rec = {"task": doc["task"], "seed": s["seed"], "budget_s": s["budget_s"], "peer": doc["peer"],
           "population_size": s["population"], "generations": doc["generations"], "curve": doc["curve"],
           "best_train_return": doc["best_training_return"], "wall_s": doc["wall_s"],
           "eval": {"simulator": "brax", "episode_length": s["episode_length"], **doc["eval"]},
           "label": f"{doc['peer']} ({s['population']:,} trees), seed {s['seed']}, {s['budget_s']:g} s, "
                    f"{doc['device']}"}
    return {"backend": "brax", "machine": {"gpus": [doc["device"]]}, "overrides": [], "records": [rec]}


def merge(paths: list[str], out: Path) -> dict[str, Any]:
    """One document and PNG per backend from the records of earlier documents (``grid.json:NAME,...``: those
    runs of a grid); each record keeps the machine it ran on and the document it came from."""
    docs = []
    for arg in paths:
        path, _, pick = arg.partition(".json:")
        path = path + ".json" if pick else arg
        doc = json.loads(Path(path).read_text())
        if "peer" in doc:  # a peer's run (bench_evogp_policies.py), drawn beside gprl's
            doc = peer_document(doc)
        named = [(None, doc)] if "records" in doc else [(k, d) for k, d in doc.items() if "records" in d]
        if pick:
            wanted = set(pick.split(","))
            missing = wanted - {k for k, _ in named}
            if missing:
                raise SystemExit(f"--merge: {path} has no finished run named {sorted(missing)}")
            named = [(k, d) for k, d in named if k in wanted]
        if not named:
            raise SystemExit(f"--merge: {path} holds no bench_policies records")
        docs += [(path, name, d) for name, d in named]
    out.mkdir(parents=True, exist_ok=True)
    merged = {}
    for backend in sorted({d["backend"] for _, _, d in docs}):
        records = [{**r, "source": f"{path}:{name}" if name else path, "machine": d["machine"],
                    "overrides": d["overrides"],
                    "label": r.get("label") or f"seed {r['seed']}, {r['budget_s']:g} s, "
                                               f"{(d['machine'].get('gpus') or ['CPU'])[0]}"}
                   for path, name, d in docs if d["backend"] == backend for r in d["records"]]
        tasks = list(dict.fromkeys(r["task"] for r in records))
        # runs of one development suite (e.g. its seeds run side by side): its targets and summary too
        suites = {d.get("suite") for _, _, d in docs if d["backend"] == backend}
        suite = SUITES.get(next(iter(suites))) if len(suites) == 1 else None
        targets = {t: suite[t][1] for t in tasks if t in suite} if suite else {}
        png = out / f"bench_policies_{backend}.png"
        plot(records, tasks, backend, "seconds of evolution per run in the legend", png, targets)
        doc = {"benchmark": "policies", "backend": backend, "merged_from": paths, "tasks": tasks,
               "evogp_table_viii": {"returns": EVOGP_TABLE_VIII, "population_size": 5000,
                                    "pipeline": "brax generalized", "episode_length": 1000},
               "records": records, "figure": str(png)}
        if suite:
            doc.update(suite=next(iter(suites)), targets=targets, summary=suite_summary(records, targets))
        (out / f"bench_policies_{backend}.json").write_text(json.dumps(doc, indent=1))
        merged[backend] = doc
    return {"records": [r for d in merged.values() for r in d["records"]], "merged": list(merged)}


# ---------------------------------------------------------------- machine
def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"host": platform.node(), "cpu_count": os.cpu_count(),
                            "processor": platform.processor() or platform.machine()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["processor"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    if shutil.which("nvidia-smi"):
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, check=False)
        info["gpus"] = [g.strip() for g in out.stdout.splitlines() if g.strip()]
    versions = {}
    for name in ("gprl", "torch", "jax", "brax", "mujoco", "gymnasium"):
        try:
            from importlib.metadata import version

            versions[name] = version(name)
        except Exception:  # noqa: BLE001  not installed
            versions[name] = None
    info["versions"] = versions
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    info["commit"] = out.stdout.strip() or None
    return info


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Arguments after -- are passed to train.py as Hydra overrides.")
    ap.add_argument("--out", default="outputs/bench_policies", help="folder of the runs, JSON and PNG")
    ap.add_argument("--suite", choices=sorted(SUITES), default=None,
                    help="a development suite: its tasks, budgets, targets, backend, seeds and episodes "
                         "(--tasks, --seeds, --episodes, --backend still narrow or change them)")
    ap.add_argument("--budget", type=float, default=None,
                    help="seconds of evolution a run (gp.time_limit; default 600, or the suite's)")
    ap.add_argument("--tasks", nargs="+", default=None, help=f"default: {', '.join(TASKS)}, or the suite's")
    ap.add_argument("--backend", choices=("auto", "brax", "mujoco", "gymnasium"), default=None,
                    help="default: mujoco, or the suite's")
    ap.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0, or the suite's")
    ap.add_argument("--episodes", type=int, default=None,
                    help="fresh episodes per exported policy (default 10, or the suite's)")
    ap.add_argument("--eval-seed", type=int, default=EVAL_SEED, help="seed of the first evaluation episode")
    ap.add_argument("--resume", action="store_true",
                    help="continue the runs of the document in --out from their last checkpoints")
    ap.add_argument("--merge", nargs="+", default=[], metavar="FILE.json[:NAME,...]",
                    help="gather the records of these documents (or grid.json files, or some of their runs) "
                         "instead of running")
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, Path(args.out))
    suite = SUITES.get(args.suite, {})
    runs_of = SUITE_RUNS.get(args.suite, {"backend": "mujoco", "episodes": 10, "seeds": [0]})
    args.tasks = args.tasks or list(suite or TASKS)
    unknown = [t for t in args.tasks if t not in (suite or TASKS)]
    if unknown:
        ap.error(f"--tasks: {unknown} not in {list(suite or TASKS)}")
    args.backend = args.backend or runs_of["backend"]
    args.seeds = args.seeds or runs_of["seeds"]
    args.episodes = args.episodes or runs_of["episodes"]
    budgets = {t: args.budget if args.budget is not None else suite[t][0] if suite else 600.0
               for t in args.tasks}
    targets = {t: suite[t][1] for t in args.tasks} if suite else {}
    if any(b is not None and b <= 0 for b in budgets.values()) or args.episodes < 1:
        ap.error("--budget must be > 0 and --episodes >= 1")
    if any(o.lstrip("+").startswith(("gp.time_limit=", "env.backend=", "hydra.run.dir=", "seed=", "env="))
           for o in overrides):
        ap.error("--budget, --backend, --seeds, --tasks and --out set gp.time_limit, env.backend, seed, env "
                 "and hydra.run.dir; do not pass them after --")
    out = Path(args.out).resolve()
    runs = [(task, seed, out / args.backend / task / f"seed{seed}")
            for task in args.tasks for seed in args.seeds]
    earlier: dict[tuple[str, int], dict[str, Any]] = {}
    if args.resume:
        path = out / f"bench_policies_{args.backend}.json"
        if not path.exists():
            ap.error(f"--resume continues the runs of {path}, which does not exist")
        earlier = {(r["task"], r["seed"]): r for r in json.loads(path.read_text())["records"]}

        def resumable(task: str, seed: int, run_dir: Path) -> bool:
            if (task, seed) not in earlier:  # never started (its folder empty): it trains from the start
                return not holds_files(run_dir)
            return any((run_dir / "checkpoints").glob("gen_*.pt"))

        missing = [str(d) for task, seed, d in runs if not resumable(task, seed, d)]
        if missing:
            ap.error(f"--resume: {path} has no run with a checkpoint in {missing}")
    else:
        taken = [str(d) for _, _, d in runs if holds_files(d)]
        if taken:
            ap.error(f"run directories already hold files: {taken}; choose another --out, remove them or "
                     "continue them with --resume")

    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    records: list[dict[str, Any]] = []
    doc = {"benchmark": "policies", "backend": args.backend, "suite": args.suite, "budgets_s": budgets,
           "targets": targets, "tasks": args.tasks,
           "seeds": args.seeds, "episodes": args.episodes, "eval_seed": args.eval_seed,
           "overrides": overrides, "started": started, "machine": machine(),
           "evogp_table_viii": {"returns": EVOGP_TABLE_VIII, "population_size": 5000,
                                "pipeline": "brax generalized", "episode_length": 1000},
           "records": records}
    path = out / f"bench_policies_{args.backend}.json"

    def write(running: dict[str, Any] | None = None) -> None:
        """The document, whole or not at all (replaced): the records so far, the run training, and the
        earlier document's records of the runs still to continue."""
        later = [earlier[(t, s)] for t, s, _ in runs[len(records) + bool(running):] if (t, s) in earlier]
        part = path.with_suffix(".json.part")
        part.write_text(json.dumps({**doc, "records": records + ([running] if running else []) + later},
                                   indent=1))
        part.replace(path)

    for task, seed, run_dir in runs:  # every training first: evaluations here hold no GPU memory meanwhile
        how = "continuing" if (task, seed) in earlier else "training"
        budget = budgets[task]
        print(f"bench_policies: {how} {task} seed {seed} on {args.backend} "
              f"({'the defaults' if budget is None else f'{budget:g} s'})", file=sys.stderr)
        records.append(train(task, args.backend, seed, budget, run_dir, overrides,
                             earlier.get((task, seed)), save=write))
        rec = records[-1]
        print(f"bench_policies: {task} seed {seed}: exit {rec['returncode']}, {rec.get('generations')} "
              f"generations, {rec['wall_s']:.1f} s", file=sys.stderr)
    write()  # trained: --resume goes on if the replays are stopped
    for rec in records:
        evaluate(rec, args.episodes, args.eval_seed)
    png = out / f"bench_policies_{args.backend}.png"
    shown = ("the defaults' budgets" if args.budget is None and suite and None in budgets.values()
             else "each task's budget" if len(set(budgets.values())) > 1
             else f"{next(iter(budgets.values())):g} s of evolution per run")
    plot(records, args.tasks, args.backend, shown, png, targets)
    doc["figure"] = str(png)
    if suite:
        doc["summary"] = suite_summary(records, targets)
    write()
    print(json.dumps(doc, indent=1))
    return doc


if __name__ == "__main__":
    result = main()
    sys.exit(1 if any(r.get("returncode", 0) != 0 or "eval_error" in r for r in result["records"]) else 0)
