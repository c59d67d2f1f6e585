"""Resuming `python train.py` after the accidents of real runs: a damaged newest checkpoint, a torn metrics
line, SIGTERM (schedulers, `timeout`), an interrupt during validation/export, and changed search settings."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from gprl.train.trainer import _truncate_metrics
from tests.train.helpers import ROOT, TINY, digest, metrics, train

BASE = ["gp.generations=3", "checkpoint_every=1", "wandb.mode=disabled"]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A finished 3-generation run; checkpoints gen_000002.pt and gen_000003.pt (keep_checkpoints=2)."""
    tmp = tmp_path_factory.mktemp("base")
    train(tmp, "run", *BASE)
    return tmp / "run"


def copy_run(base: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(base, run)
    return run


def population(path: Path) -> dict:
    return torch.load(path, weights_only=False)["population"]


@pytest.mark.parametrize("damage, cause", [
    (lambda b: b[: len(b) // 2], "truncated"),
    (lambda b: bytes(range(256)) * 20, "not a torch checkpoint"),
    (lambda b: b"", "empty file"),
])
def test_damaged_newest_checkpoint_resumes_from_the_older_one(base, tmp_path, damage, cause):
    run = copy_run(base, tmp_path)
    newest = run / "checkpoints" / "gen_000003.pt"
    newest.write_bytes(damage(newest.read_bytes()))
    res = train(tmp_path, "resumer", *BASE, f"resume={run}")
    line = [ln for ln in res.stderr.splitlines() if "skipped" in ln]
    assert len(line) == 1 and "checkpoints/gen_000003.pt (" + cause in line[0], res.stderr[-2000:]
    assert "resuming from checkpoints/gen_000002.pt" in line[0]
    # generation 2 was run again from its checkpoint: the same final population as the undamaged run
    for k, t in population(base / "checkpoints" / "gen_000003.pt").items():
        assert torch.equal(t, population(newest)[k]) if torch.is_tensor(t) else t == population(newest)[k]
    assert metrics(run) == metrics(base)
    assert (run / "checkpoints" / "gen_000003.pt.damaged").exists()  # kept aside, no longer counted or tried


def test_no_intact_checkpoint_is_one_clear_error(base, tmp_path):
    run = copy_run(base, tmp_path)
    (run / "checkpoints" / "gen_000003.pt").write_bytes(b"")
    second = run / "checkpoints" / "gen_000002.pt"
    second.write_bytes(second.read_bytes()[:1000])
    before = digest(run)
    res = train(tmp_path, "resumer", *BASE, f"resume={run}", check=False)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    err = res.stderr.strip().splitlines()[-1]
    assert err.startswith("error: resume: no intact checkpoint in") and "weights_only" not in err
    assert "gen_000003.pt (empty file)" in err and "gen_000002.pt (truncated" in err
    assert digest(run) == before


def test_torn_metrics_line_is_dropped_on_resume(base, tmp_path):
    run = copy_run(base, tmp_path)
    (run / "checkpoints" / "gen_000003.pt").unlink()  # killed while writing generation 2's line
    with open(run / "metrics.jsonl", "r+") as f:
        f.truncate(len(f.read()) - 40)
    res = train(tmp_path, "resumer", *BASE, f"resume={run}")
    assert f"{run / 'metrics.jsonl'}" in res.stderr and "torn" in res.stderr, res.stderr[-2000:]
    assert metrics(run) == metrics(base)


def test_corrupt_metrics_line_inside_the_file_is_named(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"generation": 0}\n{"generation": 1\n{"generation": 2}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl.*line 2 is not a JSON"):
        _truncate_metrics(path, 3)
    path.write_text('{"generation": 0}\n{"generation": 1}\n{"generation": 2, "best')
    assert _truncate_metrics(path, 2) == [{"generation": 0}, {"generation": 1}]
    assert path.read_text() == '{"generation": 0}\n{"generation": 1}\n'


# train.py whose export is interrupted by the given signal (sent by the process to itself, so it lands there)
INTERRUPTED_EXPORT = """
import os, signal, sys, time, runpy
from gprl.train.tasks.policy import PolicyTask
signal.signal(signal.SIGINT, signal.default_int_handler)  # as from a terminal, even under a background job
def finish(self, *args, **kwargs):
    os.kill(os.getpid(), signal.{sig})
    time.sleep(60)
PolicyTask.finish = finish
sys.argv = ["train.py", *{argv!r}]
runpy.run_path("train.py", run_name="__main__")
"""


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_interrupt_during_export_exits_with_the_resume_hint(base, tmp_path, sig):
    run = tmp_path / "run"
    argv = [f"hydra.run.dir={run}", *TINY, "progress=false", *BASE]
    env = {**os.environ, "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "0"}
    res = subprocess.run([sys.executable, "-c", INTERRUPTED_EXPORT.format(sig=sig, argv=argv)],
                         check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 128 + getattr(signal, sig), res.stdout[-2000:] + res.stderr[-2000:]
    assert "Traceback" not in res.stderr + res.stdout and f"resume={run}" in res.stdout
    assert not (run / "summary.json").exists()
    # export only, from the intact checkpoint of generation 3
    train(tmp_path, "resumer", *BASE, f"resume={run}")
    assert metrics(run) == metrics(base)
    assert (run / "policy.py").read_text() == (base / "policy.py").read_text()


def test_sigterm_handler_is_restored_and_main_thread_only():
    from gprl.train.trainer import sigterm_as_interrupt

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) is before
    import threading

    errors = []

    def other_thread():
        try:
            with sigterm_as_interrupt():
                pass
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    t = threading.Thread(target=other_thread)
    t.start()
    t.join()
    assert errors == [] and signal.getsignal(signal.SIGTERM) is before


def test_resume_with_changed_search_settings_is_refused(base, tmp_path):
    run = copy_run(base, tmp_path)
    before = digest(run)
    res = train(tmp_path, "resumer", *BASE, f"resume={run}", "seed=1", "gp.functions=[add,mul]",
                "gp.rates.crossover=0.4", check=False)
    assert res.returncode != 0
    err = res.stderr.strip().splitlines()[-1]
    assert err.startswith("error: resume: this configuration changes settings that steer the search"), err
    functions = ("gp.functions (run ['add', 'sub', 'mul', 'div', 'tanh', 'max', 'min', 'gt'], "
                 "now ['add', 'mul'])")
    for part in ("seed (run 0, now 1)", functions, "gp.rates.crossover (run 0.5, now 0.4)",
                 "resume_allow_changes=true"):
        assert part in err
    assert digest(run) == before
    # stopping rules and bookkeeping stay free to change
    train(tmp_path, "free", *BASE, f"resume={run}", "gp.generations=4", "keep_checkpoints=3",
          "checkpoint_every=2", "progress=true", "threads=1")
    assert [r["generation"] for r in metrics(run)] == [0, 1, 2, 3]


def test_resume_allow_changes_continues_and_records_them(base, tmp_path):
    run = copy_run(base, tmp_path)
    res = train(tmp_path, "resumer", *BASE, f"resume={run}", "gp.generations=4", "seed=1",
                "resume_allow_changes=true")
    assert "seed (run 0, now 1)" in res.stdout + res.stderr
    record = {"generation": 3, "changes": {"seed": {"run": 0, "now": 1}}}
    assert yaml.safe_load((run / "config_resume.yaml").read_text())["resume_changes"] == record["changes"]
    assert json.loads((run / "summary.json").read_text())["resume_changes"] == [record]
    state = torch.load(run / "checkpoints" / "gen_000004.pt", weights_only=False)
    assert state["config"]["seed"] == 1 and state["resume_changes"] == [record]


def test_checkpoint_without_stored_settings_still_resumes(base, tmp_path):
    """Checkpoints written before the search settings were stored: nothing to compare, the run continues."""
    run = copy_run(base, tmp_path)
    path = run / "checkpoints" / "gen_000003.pt"
    state = torch.load(path, weights_only=False)
    for key in ("config", "resume_changes"):
        state.pop(key, None)
    torch.save(state, path)
    train(tmp_path, "resumer", *BASE, f"resume={run}", "gp.generations=4")
    assert [r["generation"] for r in metrics(run)] == [0, 1, 2, 3]


def test_checkpoint_of_a_retired_setting_left_null_still_resumes(base, tmp_path):
    """A checkpoint written while gp.restarts existed (null, its default; the run index beside fresh_at): the
    retired setting changes nothing, a retired one set to a value is still named."""
    run = copy_run(base, tmp_path)
    path = run / "checkpoints" / "gen_000003.pt"
    state = torch.load(path, weights_only=False)
    state["config"]["gp"]["restarts"] = None
    state["restart"] = (0, state.pop("fresh_at"))
    torch.save(state, path)
    train(tmp_path, "resumer", *BASE, f"resume={run}", "gp.generations=4")
    assert [r["generation"] for r in metrics(run)] == [0, 1, 2, 3]
    state["config"]["gp"]["restarts"] = 3
    torch.save(state, run / "checkpoints" / "gen_000004.pt")
    res = train(tmp_path, "refused", *BASE, f"resume={run}", "gp.generations=5", check=False)
    assert res.returncode != 0 and "gp.restarts (run 3, now '<unset>')" in res.stderr


@pytest.mark.parametrize("stop", [["gp.time_limit=2"], ["gp.target_return=-1e9", "gp.generations=50"]])
def test_a_run_whose_search_ended_resumes_to_its_export_only(tmp_path, stop):
    """Interrupted after its time limit or target stopped the search (during refinement, validation or
    export): the resumed run evaluates no further generation and exports the same policy."""
    overrides = ["wandb.mode=disabled", "checkpoint_every=1000", *stop]
    train(tmp_path, "run", *overrides)
    run = tmp_path / "run"
    done = json.loads((run / "summary.json").read_text())
    assert done["stopped_by"] == ("time_limit" if len(stop) == 1 else "target_return")
    policy = (run / "policy.py").read_text()
    for name in ("summary.json", "policy.py"):
        (run / name).unlink()
    train(tmp_path, "resumer", *overrides, f"resume={run}")
    again = json.loads((run / "summary.json").read_text())
    assert len(metrics(run)) == done["generations"] and again["generations"] == done["generations"]
    assert again["stopped_by"] == done["stopped_by"] and (run / "policy.py").read_text() == policy
