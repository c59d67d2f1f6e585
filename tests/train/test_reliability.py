"""`python train.py` against what shared machines do to runs: a second run into a busy run directory ends in
one line that says what to do."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from gprl.train.rundir import LOCK_NAME, RunDirectoryError, RunLock
from tests.train.helpers import digest, metrics, train

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
