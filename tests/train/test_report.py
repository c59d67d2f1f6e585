"""What a run tells its user: the start banner, curve.png, the GPU-set-up warning, and a policy run that needs
none of the SR extra's packages."""

import json
import os
import subprocess
import sys

import pytest

from tests.train.helpers import ROOT, run_train, train


def test_policy_path_imports_without_the_sr_extra():
    # scikit-learn and pandas made unimportable, as in an environment installed with .[mujoco,train] only
    code = ("import sys; sys.modules['sklearn'] = None; sys.modules['pandas'] = None\n"
            "import gprl.train.trainer\n"
            "from gprl.train.tasks import task_class\n"
            "print(task_class('policy').__name__)\n"
            "try:\n"
            "    task_class('sr')\n"
            "except ImportError as err:\n"
            "    print(err)\n")
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert lines[0] == "PolicyTask"
    assert lines[1] == 'task=sr needs scikit-learn and pandas: pip install -e ".[sr]"'
    assert "sklearn" not in out.stderr


def test_banner_and_learning_curve(tmp_path):
    res = train(tmp_path, "run", "gp.generations=3", "wandb.mode=offline", "gp.time_limit=600")
    run = tmp_path / "run"
    banner = [ln for ln in res.stdout.splitlines() if ln.startswith("gprl: ")]
    assert len(banner) == 2, res.stdout
    for field in ("task policy (hopper)", "backend mujoco on cpu", "population 12", "1 episode per tree",
                  "episode length 30 -> 60 steps over 2 generations",
                  "fitness the return less 1 a step"):  # Hopper's MuJoCo default reward_shift
        assert field in banner[0], (field, banner[0])
    for field in ("budget 3 generations or 600 s", f"run directory {run}", "W&B offline"):
        assert field in banner[1], (field, banner[1])
    png = (run / "curve.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert json.loads((run / "summary.json").read_text())["files"]["curve"] == "curve.png"
    # the same image is in the offline W&B run
    logged = list((run / "wandb").glob("offline-run-*/files/media/images/curve_*.png"))
    assert len(logged) == 1, sorted(str(p) for p in (run / "wandb").rglob("*.png"))


def test_sr_run_draws_its_loss_curve(tmp_path):
    pytest.importorskip("sklearn")
    res = run_train(tmp_path, "sr", "progress=false", "task=sr", "dataset=nguyen_1", "dataset.n_samples=200",
                    "gp.population_size=64", "gp.generations=3", "wandb.mode=disabled")
    assert "gprl: task sr (nguyen_1) on cpu, population 64" in res.stdout
    assert (tmp_path / "sr" / "curve.png").stat().st_size > 5000


def test_gpu_visible_but_cpu_backend_names_the_extra(monkeypatch, capsys):
    from gprl.train import trainer

    monkeypatch.setattr(trainer, "cuda_visible", lambda: True)
    monkeypatch.setattr(trainer, "resolve_backend", lambda env_cfg: "mujoco")
    cfg = {"env": {"name": "hopper", "backend": "auto"}, "gp": {}, "task": {"name": "policy"}}
    assert trainer.apply_backend_defaults(cfg)["env"]["backend"] == "mujoco"
    assert '.[gpu]' in capsys.readouterr().err
    cfg = {"env": {"name": "hopper", "backend": "mujoco"}, "gp": {}, "task": {"name": "policy"}}
    trainer.apply_backend_defaults(cfg)  # asked for by name: nothing to warn about
    assert capsys.readouterr().err == ""


def _replay_render(run, video, gl: str):
    env = {**os.environ, "MUJOCO_GL": gl}
    return subprocess.run([sys.executable, "scripts/replay.py", str(run), "--episodes", "1",
                           "--render", str(video)],
                          check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


def test_replay_renders_or_says_why_not(tmp_path):
    train(tmp_path, "run", "gp.generations=1", "wandb.mode=disabled")
    out = _replay_render(tmp_path / "run", tmp_path / "a.mp4", "egl")
    if out.returncode == 0:
        assert (tmp_path / "a.mp4").stat().st_size > 1000
    else:  # a machine without EGL: one line, no traceback
        assert "cannot render on this machine" in out.stderr and "Traceback" not in out.stderr, out.stderr
    out = _replay_render(tmp_path / "run", tmp_path / "b.mp4", "no-such-gl")
    assert out.returncode != 0 and not (tmp_path / "b.mp4").exists()
    assert out.stderr.strip().splitlines() == [
        ("replay: cannot render on this machine (MUJOCO_GL=no-such-gl: RuntimeError); install EGL "
         "(apt-get install libegl1) or OSMesa (apt-get install libosmesa6, then MUJOCO_GL=osmesa), "
         "or replay without --render")]
