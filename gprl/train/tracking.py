"""What a run reports: the start banner, the learning curve (``curve.png``) and Weights & Biases tracking.

``Tracker(mode="disabled")`` never imports wandb. ``offline`` writes the run under ``<dir>/wandb`` for a later
``wandb sync``; ``online`` streams it.
"""

from __future__ import annotations

import errno
import math
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

MODES = ("online", "offline", "disabled")
# W&B's own process only logs a write the disk refused (in debug-internal.log): "write <path>: <reason>"
_REFUSED = re.compile(r"(/[^\s\"':]+): (no space left on device|read-only file system|disk quota exceeded)")
_ERRNOS = {"no space left on device": errno.ENOSPC, "read-only file system": errno.EROFS,
           "disk quota exceeded": errno.EDQUOT}


def banner(cfg: dict[str, Any], device: str, run_dir: str, resumed_at: int | None = None) -> str:
    """Two lines saying what the run is about to do (task, backend, device, sizes, budget, where it
    writes)."""
    gp, task = cfg["gp"], cfg["task"]["name"]
    if task == "policy":
        # the policy task's own reading of env.racing and env.episode_schedule
        from gprl.train.tasks.policy import episode_schedule, racing_shares

        env = cfg["env"]
        n, final = env.get("episodes") or 1, env["episode_length"]
        start, ramp = episode_schedule(env.get("episode_schedule"), final)
        length = (f"episode length {start} -> {final} steps over {ramp} generations"
                  if ramp > 0 and start < final else f"episode length {final}")
        horizon, finalists, e = racing_shares(env.get("racing"))
        if horizon < 1 and finalists < 1:
            e = e or n
            length += (f" (racing: every tree plays its first {horizon:.0%}, the best {finalists:.0%} the "
                       "whole episode" + (f", {e} times)" if e > 1 else ")"))
        what = (f"task policy ({env['name']}), backend {env['backend']} on {device}, population "
                f"{gp['population_size']}, {n} episode{'s' if n != 1 else ''} per tree, {length}")
        if env.get("reward_shift"):
            what += f", fitness the return less {env['reward_shift']:g} a step"
        if env.get("train_kwargs"):
            what += f", training environments with {dict(env['train_kwargs'])}"
    else:
        data = cfg.get("dataset") or {}
        what = (f"task {task} ({data.get('name') or data.get('path')}) on {device}, "
                f"population {gp['population_size']}")
    stops = [f"{gp['generations']} generations" if gp.get("generations") else "",
             f"{gp['time_limit']:g} s" if gp.get("time_limit") else ""]
    budget = " or ".join(s for s in stops if s)
    refine = (cfg["task"].get("refine") or {}) if task == "policy" else {}
    if refine:
        share = refine.get("share") or 0
        constants = refine.get("target") == "constants"
        tuned = "constants and observation scaling" if constants else "linear feedback"
        budget += f", then a refinement of the best tree's {tuned}" + (
            f" in the last {share:.0%} of the time" if share and gp.get("time_limit") else
            f" for {share / (1 - share):.2g}x the evolution's time" if share else
            f" for {refine.get('iterations')} iterations")
    draws = gp.get("draws") or 1
    start = (f", going on from the best of {draws} draws of {gp.get('draw_generations')} generations"
             if draws > 1 else "") + \
        (f", resuming at generation {resumed_at}" if resumed_at is not None else "")
    return (f"gprl: {what}\n"
            f"gprl: budget {budget}{start}; run directory {run_dir}; "
            f"W&B {(cfg.get('wandb') or {}).get('mode', 'offline')}")


def plot_curve(rows: Sequence[dict[str, Any]], path: str, score: str = "return",
               title: str = "") -> str | None:
    """Best and mean score per generation against wall-clock seconds, as a PNG; None without rows."""
    points = [(r["elapsed_s"], r.get(f"best_{score}"), r.get(f"mean_{score}"), r.get("best_so_far"))
              for r in rows if "elapsed_s" in r]
    if not points:
        return None
    try:
        import matplotlib
    except ImportError:  # the run's results are all written; only the picture is missing
        print('gprl: warning: no curve.png: matplotlib is missing (pip install -e ".[train]")',
              file=sys.stderr)
        return None

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    t = [p[0] for p in points]

    def finite(i: int) -> list[float]:
        return [v if isinstance(v, (int, float)) and math.isfinite(v) else math.nan
                for v in (p[i] for p in points)]

    fig, ax = plt.subplots(figsize=(6.4, 4), dpi=100)
    ax.plot(t, finite(1), label=f"best {score}", marker="." if len(t) < 30 else None)
    ax.plot(t, finite(2), label=f"mean {score}", alpha=0.7)
    ax.plot(t, finite(3), label="best so far", color="k", linestyle="--", linewidth=1)
    if score == "loss" and all(v > 0 for v in finite(1) + finite(2) + finite(3) if math.isfinite(v)):
        ax.set_yscale("log")
    ax.set_xlabel("wall-clock (s)")
    ax.set_ylabel(score)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = f"{path}.tmp.png"
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)  # a reader never sees half a PNG
    return path


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
            raise ImportError('W&B tracking needs wandb: pip install -e ".[train]" '
                              "(or set wandb.mode=disabled)") from err
        self._wandb = wandb
        os.makedirs(directory, exist_ok=True)
        try:
            self.run = wandb.init(mode=mode, project=project, entity=entity, group=group,
                                  tags=list(tags or []), name=name, config=config, dir=directory, id=run_id,
                                  resume="allow" if run_id else None,
                                  settings=wandb.Settings(silent=True, console="off"))
        except wandb.errors.Error as err:  # no login, no connection, a refused project: one line and the fix
            text = (str(err).strip().splitlines() or [type(err).__name__])[0]
            login = isinstance(err, wandb.errors.AuthenticationError) or "api key" in text.lower()
            raise ValueError(f"W&B ({mode}) could not start: {text} "
                             + ("Log in with `wandb login` (or set WANDB_API_KEY), or track " if login else
                                "Track ")
                             + "offline with wandb.mode=offline (upload later with `wandb sync`) or not at "
                             "all with wandb.mode=disabled") from None

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
        self.run.log({"best_formula": self._wandb.Html(f"<pre>{text}</pre>"), "best_formula_table": table},
                     step=step)
        self.run.summary["best_formula"] = text

    def log_artifact(self, name: str, kind: str, paths: Sequence[str]) -> None:
        if self.run is None:
            return
        art = self._wandb.Artifact(name, type=kind)
        for p in paths:
            if os.path.exists(p):
                art.add_file(p)
        self.run.log_artifact(art)

    def log_image(self, path: str, key: str, step: int) -> None:
        if self.run is not None and os.path.exists(path):
            self.run.log({key: self._wandb.Image(path)}, step=step)

    def log_video(self, path: str, key: str = "replay") -> None:
        if self.run is not None and os.path.exists(path):
            self.run.log({key: self._wandb.Video(path, format="mp4")})

    def summary(self, values: dict[str, Any]) -> None:
        if self.run is not None:
            self.run.summary.update(values)

    def finish(self) -> None:
        """Ends the W&B run; an OSError (ENOSPC, EROFS, EDQUOT) naming the file when W&B's own process could
        not write its files, which it only logs."""
        if self.run is None:
            return
        log = getattr(getattr(self.run, "settings", None), "log_internal", None)
        self.run.finish()
        self.run = None
        try:
            with open(log, errors="replace") as f:
                found = _REFUSED.search(f.read()) if log else None
        except (OSError, TypeError):
            found = None
        if found:
            raise OSError(_ERRNOS[found[2]], found[2], found[1])
