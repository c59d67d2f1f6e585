"""Shared by the tests of the training app: `python train.py` runs at tiny sizes, the replay script without
gprl, metrics, checkpoints, W&B offline files and folder digests."""

import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TINY = ["env=hopper", "gp.population_size=12", "gp.elitism=2", "env.episode_length=60",
        "env.episode_schedule={start: 30, ramp_generations: 2}", "task.validation_episodes=3",
        "task.hall_of_fame=3", "env.episodes=1", "task.refine=false"]  # one start a tree, no refinement: fast


def run_train(tmp_path: Path, run: str, *overrides: str, check: bool = True, wait: bool = True):
    """`python train.py` into tmp_path/run with offline W&B; wait=False returns the running process."""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path / "wandb_home"),
           "WANDB_SILENT": "true", "HYDRA_FULL_ERROR": "0"}
    cmd = [sys.executable, "train.py", f"hydra.run.dir={tmp_path / run}", *overrides]
    if not wait:
        # The child must get SIGINT as from a terminal. Under a background job the shell sets SIGINT to
        # ignored, children inherit that and Python then installs no Ctrl-C handler: a handled signal (here,
        # for the spawn only) is reset to the default in the child instead.
        before = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
        finally:
            signal.signal(signal.SIGINT, before)
    res = subprocess.run(cmd, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    if check and res.returncode != 0:
        raise AssertionError(f"train.py failed ({res.returncode}):\n{res.stdout[-3000:]}\n"
                             f"{res.stderr[-3000:]}")
    return res


def train(tmp_path: Path, run: str, *overrides: str, check: bool = True, wait: bool = True):
    return run_train(tmp_path, run, *TINY, "progress=false", *overrides, check=check, wait=wait)


def kill_and_resume(tmp_path: Path, train_fn, overrides: list[str], checkpoint: str) -> tuple[Path, Path]:
    """Runs `full` to the end, kills `killed` with SIGKILL once `checkpoint` exists, resumes it; both dirs."""
    train_fn(tmp_path, "full", *overrides)
    proc = train_fn(tmp_path, "killed", *overrides, wait=False)
    ckpt = tmp_path / "killed" / "checkpoints" / checkpoint
    deadline = time.time() + 200
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (tmp_path / "killed" / "summary.json").exists(), "the run finished before it could be killed"
    train_fn(tmp_path, "resumer", *overrides, f"resume={tmp_path / 'killed'}")
    return tmp_path / "full", tmp_path / "killed"


def assert_same_final_population(full: Path, resumed: Path, checkpoint: str) -> tuple[dict, dict]:
    a = torch.load(full / "checkpoints" / checkpoint, weights_only=False)
    b = torch.load(resumed / "checkpoints" / checkpoint, weights_only=False)
    for k in ("kind", "code", "out", "value", "size"):
        assert torch.equal(a["population"][k], b["population"][k])
    return a, b


def replay(*args: str) -> dict:
    # the replay must not need gprl or torch: both are made unimportable
    code = ("import sys, runpy; sys.modules['torch'] = None; sys.modules['gprl'] = None; "
            f"sys.argv = ['replay.py', *{list(args)!r}]; "
            "runpy.run_path('scripts/replay.py', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def metrics(run: Path) -> list[dict]:
    rows = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    timing = ("elapsed_s", "generation_s", "env_steps_per_s")
    return [{k: v for k, v in r.items() if k not in timing} for r in rows]


def wandb_records(path: Path):
    """Records of a .wandb file (LevelDB log format: 32 KiB blocks of crc32/len/type-framed chunks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, buf = 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 2):
            buf = chunk
        else:
            buf += chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            yield rec


def digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}
