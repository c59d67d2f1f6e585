"""`python train.py task=sr|classification dataset=...` end to end on the CPU: every file, model.py reproduces
the recorded losses, held-out metrics, kill + resume bit-identical, clear errors."""

import csv
import importlib.util
import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gprl import datasets
from tests.train.helpers import (
    assert_same_final_population,
    digest,
    kill_and_resume,
    metrics,
    run_train,
    wandb_records,
)
from tests.train.helpers import train as train_policy

SR = ["task=sr", "dataset=koza_quartic", "gp.population_size=200", "wandb.mode=disabled", "progress=false"]
CLF = ["task=classification", "dataset=wine", "gp.population_size=200", "wandb.mode=disabled",
       "progress=false"]


def train(tmp_path: Path, run: str, *overrides: str, check: bool = True, wait: bool = True):
    return run_train(tmp_path, run, *overrides, check=check, wait=wait)


def load_module(path: Path):
    # model.py must run without gprl and torch
    saved = {k: sys.modules.get(k) for k in ("torch", "gprl")}
    sys.modules["torch"] = sys.modules["gprl"] = None
    try:
        spec = importlib.util.spec_from_file_location(f"model_{abs(hash(str(path)))}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            sys.modules[k] = v
    return module


def test_sr_run_writes_every_file_and_model_py_reproduces_the_loss(tmp_path):
    train(tmp_path, "sr", *[o for o in SR if not o.startswith("wandb")], "wandb.mode=offline",
          "gp.generations=8")
    run = tmp_path / "sr"
    for name in ("config.yaml", "metrics.jsonl", "summary.json", "model.txt", "model.tex", "model.py",
                 "model.json", "equations.csv"):
        assert (run / name).stat().st_size > 0, name
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["gen_000005.pt", "gen_000008.pt"]
    rows = metrics(run)
    assert [r["generation"] for r in rows] == list(range(8))
    assert all({"best_loss", "best_size", "test_loss", "test_r2"} <= set(r) for r in rows)
    assert all(a["best_so_far"] >= b["best_so_far"] for a, b in itertools.pairwise(rows))  # lower is better
    cfg = (run / "config.yaml").read_text()
    assert "name: koza_quartic" in cfg and "\nenv:" not in cfg
    rec = json.loads((run / "model.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    assert rec["feature_names"] == ["x0"] and set(rec["formulas"]) == {"y"}
    assert summary["files"]["py"] == "model.py" and "test_r2" in summary and "best_train_loss" in summary
    data = datasets.load("koza_quartic")
    model = load_module(run / "model.py")
    mse = float(np.mean((model.predict(data.X_train) - data.y_train) ** 2))
    assert mse == pytest.approx(rec["meta"]["train_loss"], rel=1e-5)
    test_mse = float(np.mean((model.predict(data.X_test) - data.y_test) ** 2))
    assert test_mse == pytest.approx(summary["test_loss"], rel=1e-5)
    # the raw-unit float64 formula agrees with the float32 kernel-order evaluation
    np.testing.assert_allclose(model.formula_scores(data.X_test)[:, 0], model.predict(data.X_test), rtol=1e-4,
                               atol=1e-5)
    front = list(csv.DictReader((run / "equations.csv").open()))
    complexity = [int(r["complexity"]) for r in front]
    assert complexity == sorted(complexity) and sum(int(r["selected"]) for r in front) == 1
    losses = [float(r["loss"]) for r in front]
    assert all(a > b for a, b in itertools.pairwise(losses))  # a Pareto front: longer only when better
    (chosen,) = [r for r in front if r["selected"] == "1"]
    assert float(chosen["loss"]) == pytest.approx(rec["meta"]["train_loss"])
    # W&B (offline): the per-generation history and the exported files as the "model" artifact
    (run_file,) = (run / "wandb").glob("offline-run-*/run-*.wandb")
    history, artifacts = [], {}
    for r in wandb_records(run_file):
        kind = r.WhichOneof("record_type")
        if kind == "history":
            history.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                            for i in r.history.item})
        elif kind == "artifact":
            artifacts[r.artifact.name] = sorted(m.path for m in r.artifact.manifest.contents)
    assert ([h["best_loss"] for h in history if "best_loss" in h]
            == pytest.approx([r["best_loss"] for r in rows]))
    assert artifacts["model"] == ["equations.csv", "model.json", "model.py", "model.tex", "model.txt"]


def test_sr_linear_scaling_is_exported_and_off_gives_the_tree_itself(tmp_path):
    """auto (mse): the model is a + b * tree in model.py, model.json and the formulas; false: a = 0, b = 1."""
    data = datasets.load("koza_quartic")
    for setting in ("auto", "false"):
        train(tmp_path, setting, *SR, "gp.generations=3", f"task.linear_scaling={setting}")
        rec = json.loads((tmp_path / setting / "model.json").read_text())
        model = load_module(tmp_path / setting / "model.py")
        raw = model.scores(data.X_train)[:, 0].astype(np.float64)
        if setting == "auto":
            a, b = rec["scaling"]["intercept"][0], rec["scaling"]["slope"][0]
            assert rec["meta"]["linear_scaling"] and (a, b) != (0.0, 1.0)
            # the least-squares line through the tree's outputs
            np.testing.assert_allclose([a, b], np.polynomial.polynomial.polyfit(raw, data.y_train, 1),
                                       rtol=1e-6, atol=1e-9)
        else:
            assert rec["scaling"] is None and not rec["meta"]["linear_scaling"]
            a, b = 0.0, 1.0
        np.testing.assert_allclose(model.predict(data.X_train), a + b * raw)
        mse = float(np.mean((model.predict(data.X_train) - data.y_train) ** 2))
        assert mse == pytest.approx(rec["meta"]["train_loss"], rel=1e-5)


def test_classification_run_reports_held_out_accuracy(tmp_path):
    train(tmp_path, "clf", *CLF, "gp.generations=5")
    run = tmp_path / "clf"
    for name in ("model.txt", "model.tex", "model.py", "model.json", "equations.csv", "summary.json"):
        assert (run / name).stat().st_size > 0, name
    summary = json.loads((run / "summary.json").read_text())
    data = datasets.load("wine")
    model = load_module(run / "model.py")
    accuracy = float(np.mean(model.predict(data.X_test) == data.y_test))
    assert summary["test_accuracy"] == pytest.approx(accuracy, abs=1e-6) and accuracy > 0.5
    assert model.predict_proba(data.X_test).shape == (len(data.X_test), 3)
    assert model.CLASSES == [0, 1, 2] and len(model.OUTPUT_NAMES) == 3
    rows = metrics(run)
    assert all("test_accuracy" in r and "train_accuracy" in r for r in rows)


def test_sr_killed_and_resumed_run_is_bit_identical(tmp_path):
    gens = [*SR, "gp.generations=30", "checkpoint_every=1", "gp.population_size=2000"]
    full, resumed = kill_and_resume(tmp_path, train, gens, "gen_000003.pt")
    assert metrics(full) == metrics(resumed)
    a, b = assert_same_final_population(full, resumed, "gen_000030.pt")
    assert torch.equal(a["task"]["archive_loss"], b["task"]["archive_loss"])
    for name in ("model.json", "model.py", "equations.csv"):
        assert (full / name).read_text() == (resumed / name).read_text(), name


def test_resuming_a_policy_run_as_sr_fails_and_leaves_the_run(tmp_path):
    train_policy(tmp_path, "policy", "gp.generations=1", "wandb.mode=disabled")
    before = digest(tmp_path / "policy")
    res = train(tmp_path, "x", *SR, "gp.generations=2", f"resume={tmp_path / 'policy'}", check=False)
    assert res.returncode != 0
    assert "does not match" in res.stderr and "task: run has 'policy', this configuration 'sr'" in res.stderr
    assert digest(tmp_path / "policy") == before


@pytest.mark.parametrize("overrides, message", [
    (["task=sr", "dataset=nguyen_99"], "Available options in 'dataset'"),
    (["task=sr", "dataset=wine"],
     "dataset 'wine' is a classification dataset; train it with task=classification"),
    (["task=sr", "dataset.name=nope"], "dataset.name: unknown dataset 'nope'; choose one of ["),
    (["task=sr", "dataset=csv"], "dataset=csv needs dataset.path"),
    (["task=sr", "task.metric=r2"], "task.metric must be one of ['mse', 'mae', 'rmse']"),
    (["task=sr", "task.metric=mae", "task.linear_scaling=true"], "use task.metric=mse|rmse or task.linear_"),
    (["task=sr", "task.linear_scaling=maybe"], "task.linear_scaling must be true, false or auto"),
])
def test_bad_dataset_input_is_named(tmp_path, overrides, message):
    res = train(tmp_path, "bad", *overrides, "gp.generations=1", "wandb.mode=disabled", check=False)
    assert res.returncode != 0
    assert message in res.stderr + res.stdout
    if overrides[1] == "dataset=nguyen_99":
        assert "koza_quartic" in res.stderr and "wine" in res.stderr
