"""Resuming `python train.py` after the accidents of real runs: a damaged newest checkpoint, a torn metrics
line, SIGTERM (schedulers, `timeout`), an interrupt during validation/export, and changed search settings."""

import shutil
from pathlib import Path

import pytest
import torch
from test_train_app import _digest, metrics, train

from gprl.trainer import _truncate_metrics

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
    before = _digest(run)
    res = train(tmp_path, "resumer", *BASE, f"resume={run}", check=False)
    assert res.returncode != 0 and "Traceback" not in res.stderr
    err = res.stderr.strip().splitlines()[-1]
    assert err.startswith("error: resume: no intact checkpoint in") and "weights_only" not in err
    assert "gen_000003.pt (empty file)" in err and "gen_000002.pt (truncated" in err
    assert _digest(run) == before


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
