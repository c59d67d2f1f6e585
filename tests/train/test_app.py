"""`python train.py` end to end on the CPU (tiny populations and episodes): files, replay in Gymnasium's own
Hopper-v5, kill + resume bit-identical, offline W&B contents, bad input."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.train.helpers import (
    ROOT,
    TINY,
    assert_same_final_population,
    digest,
    kill_and_resume,
    metrics,
    replay,
    run_train,
    train,
    wandb_records,
)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("short")
    train(tmp, "run", "gp.generations=2", "wandb.mode=offline")
    return tmp / "run"


def test_short_run_writes_every_file(short_run):
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "policy.txt", "policy.tex", "policy.py",
                 "policy.json"):
        assert (short_run / name).stat().st_size > 0, name
    assert sorted(p.name for p in (short_run / "checkpoints").iterdir()) == ["gen_000002.pt"]
    rows = metrics(short_run)
    assert [r["generation"] for r in rows] == [0, 1] and [r["episode_length"] for r in rows] == [30, 45]
    assert all(r["best_return"] >= r["mean_return"] for r in rows)
    rec = json.loads((short_run / "policy.json").read_text())
    assert rec["meta"]["env"] == "hopper" and len(rec["obs_names"]) == 11 and len(rec["formulas"]) == 3
    assert rec["normalization"]["std"] != [1.0] * 11  # statistics from generation 0 were used
    txt = (short_run / "policy.txt").read_text().splitlines()
    assert len(txt) == 4 and all(line.split(" = ")[0] in ("a0", "a1", "a2") for line in txt[1:])
    assert "\\begin{align}" in (short_run / "policy.tex").read_text()
    cfg = (short_run / "config.yaml").read_text()
    assert "population_size: 12" in cfg and "backend: mujoco" in cfg


def test_replay_reproduces_recorded_fitness_in_gymnasium(short_run):
    """Gymnasium's own Hopper-v5 with the NumPy policy, from the recorded initial states."""
    out = replay(str(short_run), "--reproduce")
    rec = json.loads((short_run / "policy.json").read_text())["meta"]["validation"]
    # MuJoCo Hopper's default second round: a pick that played it records that round's episodes (more than
    # 3); a simplified form of the pick, played after the rounds, the first round's starts
    assert rec.get("first_round_episodes", 3) == 3 and rec["validation_episodes"] >= 3
    assert out["backend"] == "gymnasium" and out["episodes"] == rec["validation_episodes"]
    assert out["episode_length"] == 60
    assert out["mean_return"] == pytest.approx(rec["validation_return"], rel=1e-4)
    fresh = replay(str(short_run / "policy.py"), "--episodes", "2", "--seed", "123")
    assert fresh["episodes"] == 2 and len(fresh["returns"]) == 2


def test_offline_wandb_holds_history_and_artifacts(short_run):
    (run_file,) = (short_run / "wandb").glob("offline-run-*/run-*.wandb")
    history, artifacts, config = [], {}, None
    for rec in wandb_records(run_file):
        kind = rec.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                            for i in rec.history.item})
        elif kind == "artifact":
            artifacts[rec.artifact.name] = sorted(m.path for m in rec.artifact.manifest.contents)
        elif kind in ("config", "run"):
            items = rec.config.update if kind == "config" else rec.run.config.update
            config = {**(config or {}), **{i.key: json.loads(i.value_json) for i in items if i.key}}
    rows = metrics(short_run)
    assert [h["generation"] for h in history] == [0, 1]
    assert [h["best_return"] for h in history] == pytest.approx([r["best_return"] for r in rows])
    assert artifacts["policy"] == ["policy.json", "policy.py", "policy.tex", "policy.txt"]
    assert artifacts["checkpoint"] == ["gen_000002.pt"]
    assert any("best_formula_table" in name for name in artifacts)
    assert history[-1]["best_formula/_type"] == "html-file" and history[-1]["best_formula_table/nrows"] == 1
    assert config["gp"]["population_size"] == 12 and config["env"]["name"] == "hopper"


def test_killed_and_resumed_run_is_bit_identical(tmp_path):
    gens = ["gp.generations=6", "checkpoint_every=1", "wandb.mode=disabled", "env.episode_length=150"]
    full, resumed = kill_and_resume(tmp_path, train, gens, "gen_000002.pt")
    assert metrics(full) == metrics(resumed)
    a, b = assert_same_final_population(full, resumed, "gen_000006.pt")
    assert torch.equal(a["task"]["normalizer"]["m2"], b["task"]["normalizer"]["m2"])
    pa, pb = (json.loads((d / "policy.json").read_text()) for d in (full, resumed))
    assert pa == pb
    assert (full / "policy.py").read_text() == (resumed / "policy.py").read_text()


def test_resume_of_another_task_fails_and_leaves_the_run(short_run, tmp_path):
    before = digest(short_run)
    res = train(tmp_path, "x", f"resume={short_run}", "env=walker2d", "gp.generations=3", check=False)
    assert res.returncode != 0
    assert ("does not match" in res.stderr
            and "env: run has 'hopper', this configuration 'walker2d'" in res.stderr)
    # another observation size of the same task
    res = train(tmp_path, "y", f"resume={short_run}", "gp.generations=3",
                "env.kwargs={exclude_current_positions_from_observation: false}", check=False)
    assert res.returncode != 0 and "obs_dim: run has 11, this configuration 12" in res.stderr
    assert digest(short_run) == before


def test_resume_alone_continues_with_the_runs_own_settings(short_run, tmp_path):
    """`resume=<dir>` without the run's overrides (tiny population, short episodes): they apply again, and one
    given now (gp.generations) wins."""
    run = tmp_path / "copy"
    shutil.copytree(short_run, run)
    res = run_train(tmp_path, "r", f"resume={run}", "gp.generations=3", "progress=false")
    assert "gprl: resume: the run's own settings" in res.stdout and "gp.population_size=12" in res.stdout
    assert "gp.generations=2" not in res.stdout
    assert [r["generation"] for r in metrics(run)] == [0, 1, 2]
    cfg = (run / "config_resume.yaml").read_text()
    assert "population_size: 12" in cfg and "episode_length: 60" in cfg and "generations: 3" in cfg


@pytest.mark.parametrize("override, message", [
    ("env=hoppper", "unknown task 'hoppper' for any installed backend. Did you mean hopper"),
    ("env.backend=bullet", "unknown backend 'bullet'; choose one of ['auto', 'gymnasium', 'mujoco', "),
    ("gp.max_len=long", "Value 'long' of type 'str' could not be converted to Integer"),
    ("gp.population_size=-3", "gp.population_size must be a positive number"),
    ("gp.islands=7", "must be a multiple of gp.islands (7)"),
    ("wandb.mode=sometimes", "wandb.mode must be one of ['online', 'offline', 'disabled']"),
    ("resume=/nonexistent/run", "does not exist"),
])
def test_bad_input_is_named(tmp_path, override, message):
    res = train(tmp_path, "bad", "gp.generations=1", override, check=False)
    assert res.returncode != 0
    assert message in res.stderr + res.stdout
    if override.startswith("env=hop"):
        assert "hopper" in res.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_interrupt_writes_a_checkpoint_and_resumes(tmp_path, sig):
    """Ctrl-C, or SIGTERM as schedulers and `timeout` send it: a checkpoint, the resume hint, then
    exit 128 + signal."""
    opts = ["checkpoint_every=100", "wandb.mode=disabled", "env.episode_length=150"]
    # more generations than the test waits for: a fast machine must not finish before Ctrl-C arrives
    proc = train(tmp_path, "run", "gp.generations=100000", *opts, wait=False)
    metrics_file = tmp_path / "run" / "metrics.jsonl"
    deadline = time.time() + 200
    while time.time() < deadline and proc.poll() is None and not (
            metrics_file.exists() and len(metrics_file.read_text().splitlines()) >= 2):
        time.sleep(0.05)
    proc.send_signal(sig)
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()  # if the signal did not end it (the run asks for 100,000 generations)
    assert proc.returncode == 128 + sig, out[-2000:]
    how = "interrupted by SIGTERM" if sig == signal.SIGTERM else "interrupted"
    assert f"{how}: checkpoint written" in out and f"resume={tmp_path / 'run'}" in out
    assert "Traceback" not in out
    # no periodic checkpoint was due: the signal wrote this one
    (ckpt,) = (tmp_path / "run" / "checkpoints").iterdir()
    done = int(ckpt.stem.split("_")[1])
    # generation 1's metrics line is written before its variation ends; Ctrl-C there saves the state before
    # generation 1 (and the resume rewrites that line), so two lines guarantee one generation done, not two
    assert done >= 1
    train(tmp_path, "resumer", f"gp.generations={done + 2}", *opts, f"resume={tmp_path / 'run'}")
    assert [r["generation"] for r in metrics(tmp_path / "run")] == list(range(done + 2))
    assert (tmp_path / "run" / "policy.py").exists()


def test_discrete_task_exports_an_argmax_policy(tmp_path):
    """CartPole (Gymnasium backend, 2 actions): argmax of the exported scores replays the recorded return."""
    train(tmp_path, "cp", "env=cartpole", "gp.generations=2", "wandb.mode=disabled", "env.episode_length=80",
          "env.episode_schedule=null")
    rec = json.loads((tmp_path / "cp" / "policy.json").read_text())
    assert rec["action"]["transform"] == "argmax" and len(rec["formulas"]) == 2
    out = replay(str(tmp_path / "cp"), "--reproduce")
    assert out["mean_return"] == pytest.approx(out["recorded_return"], rel=1e-4)


def test_validation_fills_the_batch_in_blocks(tmp_path):
    """validation_episodes=0: the hall of fame shares the training batch (uneven blocks), env reused."""
    train(tmp_path, "v", "gp.generations=4", "wandb.mode=disabled", "task.validation_episodes=0",
          "task.hall_of_fame=5", "task.final_candidates=0",  # the hall of fame's 4 trees and the front
          "task.validation_keep=false")  # one round
    meta = json.loads((tmp_path / "v" / "policy.json").read_text())["meta"]
    validated = [c for c in meta["candidates"] if c["source"] != "simplified"]
    sizes = [c["validation_episodes"] for c in validated]
    # the hall of fame's 4 trees and the last generation's front share the batch, or one episode each
    assert sum(sizes) == max(12, len(sizes)) and max(sizes) - min(sizes) <= 1 and len(sizes) >= 4
    starts = [c["validation_seed"] - validated[0]["validation_seed"] for c in validated]
    assert starts == [sum(sizes[:k]) for k in range(len(sizes))]
    out = replay(str(tmp_path / "v"), "--reproduce")
    assert out["episodes"] == meta["validation"]["validation_episodes"]
    assert out["mean_return"] == pytest.approx(meta["validation"]["validation_return"], rel=1e-4)


def test_multirun_makes_one_run_directory_per_job(tmp_path):
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wandb_home")}
    cmd = [sys.executable, "train.py", "-m", "seed=0,1", *TINY, "gp.generations=1", "wandb.mode=disabled",
           "progress=false", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    res = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    policies = [json.loads((tmp_path / "sweep" / job / "policy.json").read_text()) for job in ("0", "1")]
    assert policies[0]["tree"] != policies[1]["tree"]  # different seeds, different runs
