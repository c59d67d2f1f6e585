"""`python train.py` against what shared machines do to runs: a second run into a busy run directory, a full
disk while writing, and library errors a user can fix (no W&B login, a missing simulator extra), each ending
in one line that says what to do."""

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
import torch

from gprl.backend.build import cache_dir
from gprl.train.rundir import LOCK_NAME, RunDirectoryError, RunLock
from tests.train.helpers import ROOT, TINY, digest, metrics, train

BASE = ["wandb.mode=disabled", "checkpoint_every=1"]


def last_line(res) -> str:
    return res.stderr.strip().splitlines()[-1]


def one_line_error(res) -> str:
    """The run's error: exit status 1, no traceback, one line on stderr starting with "error: "."""
    out = res.stdout + res.stderr
    assert res.returncode == 1 and "Traceback" not in out, out[-3000:]
    line = last_line(res)
    assert line.startswith("error: "), res.stderr[-3000:]
    return line


# ---- one process per run directory ----

def test_two_runs_started_into_one_directory_at_once(tmp_path):
    """Both pass the check before Hydra writes (neither holds the lock yet); the run's own lock lets one
    through and stops the other, which names it."""
    procs = [train(tmp_path, "run", "gp.generations=3", *BASE, wait=False) for _ in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], outs
    winner, loser = (0, 1) if procs[0].returncode == 0 else (1, 0)
    error = outs[loser].strip().splitlines()[-1]
    assert error.startswith(f"error: run directory {tmp_path / 'run'} is in use by pid {procs[winner].pid} "
                            f"on host {socket.gethostname()} (since "), outs[loser]
    assert "Traceback" not in outs[loser]
    # the winner's run alone: each generation once, and its lock gone with it
    assert [r["generation"] for r in metrics(tmp_path / "run")] == [0, 1, 2]
    assert not (tmp_path / "run" / LOCK_NAME).exists()


def test_a_busy_directory_refuses_a_new_run_and_a_resume(tmp_path):
    """A live holder (here this test process, through the run's own lock): a new run into its directory and
    a resume of it stop before writing anything."""
    run = tmp_path / "run"
    train(tmp_path, "run", "gp.generations=2", *BASE)
    lock = RunLock(run)
    lock.acquire()
    try:
        before = digest(run)
        for extra in ([], [f"resume={run}", f"hydra.run.dir={tmp_path / 'other'}"]):
            started = time.monotonic()
            res = train(tmp_path, "run", "gp.generations=3", *BASE, *extra, check=False)
            assert time.monotonic() - started < 60
            error = one_line_error(res)
            assert error.startswith(f"error: run directory {run} is in use by pid {os.getpid()} on host "
                                    f"{socket.gethostname()}"), error
            assert digest(run) == before  # not even Hydra's .hydra/ files were rewritten
    finally:
        lock.release()
    assert not (run / LOCK_NAME).exists()
    train(tmp_path, "resumer", "gp.generations=3", *BASE, f"resume={run}")  # free again
    assert [r["generation"] for r in metrics(run)] == [0, 1, 2]


def test_lock_is_exclusive_and_a_dead_holders_lock_is_taken_over(tmp_path, capsys):
    first = RunLock(tmp_path)
    first.acquire()
    held = json.loads((tmp_path / LOCK_NAME).read_text())
    assert held["pid"] == os.getpid() and held["host"] == socket.gethostname()
    with pytest.raises(RunDirectoryError, match=rf"in use by pid {os.getpid()} on host"):
        RunLock(tmp_path).acquire()  # flock: a second open file of the same process is refused too
    first.release()
    assert not (tmp_path / LOCK_NAME).exists()
    # a process killed while holding it leaves the file, but not the lock
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    pid = int(dead.stdout)
    (tmp_path / LOCK_NAME).write_text(json.dumps({"host": "elsewhere", "pid": pid, "started": "earlier"}))
    second = RunLock(tmp_path)
    second.acquire()
    assert f"took over the lock of {tmp_path} left by pid {pid} on host elsewhere" in capsys.readouterr().err
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    second.release()


# ---- a full or read-only disk ----

# train.py whose checkpoint `fail_at` (counting from 1) meets a full disk the way torch reports it
FULL_DISK = """
import runpy, sys, torch
save, calls = torch.save, []
def full_disk(obj, f, *args, **kwargs):
    calls.append(1)
    if len(calls) == {fail_at}:
        f.write(b"PK\\x03\\x04" + bytes(1000))  # part of the archive, as far as the disk took it
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 163456 vs 163344")
    return save(obj, f, *args, **kwargs)
torch.save = full_disk
sys.argv = ["train.py", *{argv!r}]
runpy.run_path("train.py", run_name="__main__")
"""


def test_full_disk_while_checkpointing_is_one_line_and_a_copy_resumes(tmp_path):
    run = tmp_path / "run"
    argv = [f"hydra.run.dir={run}", *TINY, "progress=false", "gp.generations=5", *BASE]
    env = {**os.environ, "HYDRA_FULL_ERROR": "0"}
    res = subprocess.run([sys.executable, "-c", FULL_DISK.format(fail_at=3, argv=argv)], check=False,
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    error = one_line_error(res)
    folder = run / "checkpoints"
    assert error.startswith(f"error: could not write {folder / 'gen_000003.pt'}: the file system took only "
                            "part of it (torch: [enforce fail at inline_container.cc:672]"), error
    assert error.endswith(f"The checkpoint {folder / 'gen_000002.pt'} is complete: once the disk has space "
                          f"again (or is writable), continue with: python train.py resume={run}")
    # nothing half-written is left, the complete checkpoints load, the lock is gone
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["gen_000001.pt", "gen_000002.pt"]
    assert torch.load(run / "checkpoints" / "gen_000002.pt", weights_only=False)["generation"] == 2
    assert not (run / LOCK_NAME).exists()
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    train(tmp_path, "resumer", "gp.generations=5", *BASE, f"resume={copy}")
    assert [r["generation"] for r in metrics(copy)] == [0, 1, 2, 3, 4]
    assert (copy / "policy.py").exists()


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 300 kB tmpfs (two tiny runs' checkpoints fit, a third does not); skipped where mounting is not
    allowed."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mnt)], check=False,
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.strip() or res.returncode})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_run_on_a_real_full_disk_is_one_line_and_a_copy_resumes(tmp_path, small_tmpfs):
    run = small_tmpfs / "run"
    res = train(tmp_path, str(run), "gp.generations=12", *BASE, check=False)
    error = one_line_error(res)
    assert error.startswith(f"error: could not write {run}/"), error
    kept = sorted((run / "checkpoints").iterdir())
    assert kept and all(p.name.startswith("gen_") and p.suffix == ".pt" for p in kept)  # no temporary file
    assert f"The checkpoint {kept[-1]} is complete" in error and error.endswith(f"resume={run}")
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    train(tmp_path, "resumer", "gp.generations=12", *BASE, f"resume={copy}")
    assert [r["generation"] for r in metrics(copy)] == list(range(12))


def test_a_read_only_run_directory_is_one_line(tmp_path, small_tmpfs):
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    res = train(tmp_path, str(small_tmpfs / "run"), "gp.generations=1", *BASE, check=False)
    assert one_line_error(res) == (f"error: cannot write the run directory {small_tmpfs / 'run'}: "
                                   f"{small_tmpfs} is read-only (or not writable for this user); pass "
                                   "hydra.run.dir=<a writable folder>")


def test_a_write_that_wandbs_own_process_could_not_make_is_raised(tmp_path, monkeypatch):
    """W&B writes its files in a process of its own, which only logs a refused write (the line below is one
    it logged on a full 380 kB tmpfs, where the run used to end with exit status 0)."""
    from gprl.train.tracking import Tracker

    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = Tracker("offline", directory=str(tmp_path), config={"seed": 0})
    log = tracker.run.settings.log_internal
    lost = f"{tracker.run.dir}/../run-{tracker.run_id}.wandb"
    with open(log, "a") as f:
        f.write(json.dumps({"level": "ERROR", "msg": "writer: failed closing store: transactionlog: error "
                            f"closing writer: write {lost}: no space left on device"}) + "\n")
    with pytest.raises(OSError) as err:
        tracker.finish()
    assert err.value.errno == errno.ENOSPC and err.value.filename == lost
    clean = Tracker("offline", directory=str(tmp_path / "clean"), config={"seed": 0})
    clean.finish()  # nothing refused: no error


# ---- errors of the tracking and environment libraries ----

BLOCKED = """
import runpy, sys
for name in {blocked!r}:
    sys.modules[name] = None  # as if not installed
sys.argv = ["train.py", *{argv!r}]
runpy.run_path("train.py", run_name="__main__")
"""


@pytest.mark.parametrize("overrides, blocked, message", [
    (["wandb.mode=online"], [],
     ("error: W&B (online) could not start: No API key configured. Use `wandb login` to log in. Log in with "
      "`wandb login` (or set WANDB_API_KEY), or track offline with wandb.mode=offline")),
    (["env.backend=brax"], ["brax", "brax.envs"],
     "error: the 'brax' environment backend needs the Python package 'brax', which is not installed"),
], ids=["wandb_login", "missing_extra"])
def test_library_errors_a_user_can_fix_are_one_line(tmp_path, overrides, blocked, message):
    argv = [f"hydra.run.dir={tmp_path / 'run'}", *TINY, "progress=false", "gp.generations=1",
            "wandb.mode=disabled", *overrides]
    # no W&B login anywhere: a home of its own, no key in the environment
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), GPRL_CACHE=str(cache_dir()), HYDRA_FULL_ERROR="0")
    res = subprocess.run([sys.executable, "-c", BLOCKED.format(blocked=blocked, argv=argv)], check=False,
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
                         stdin=subprocess.DEVNULL)
    assert one_line_error(res).startswith(message), res.stderr[-3000:]
