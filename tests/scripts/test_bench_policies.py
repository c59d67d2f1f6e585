"""scripts/bench_policies.py on the CPU at a tiny budget (one MuJoCo task, 12 trees, 50-step episodes): the
record's fields agree with the run's own files, and the PNG is written."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("mujoco", reason="needs the mujoco extra: pip install -e '.[mujoco]'")
pytest.importorskip("gymnasium", reason="needs the gymnasium extra: pip install -e '.[gymnasium]'")
pytest.importorskip("matplotlib", reason="needs matplotlib (the train extra)")

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_policies.py"


def load_script():
    spec = importlib.util.spec_from_file_location("bench_policies", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sympy_nodes(formula: str) -> int:
    """Nodes of a policy.txt formula, parsed from the text (the script rebuilds it from the tree instead)."""
    import sympy

    names = {n: sympy.Function(n) for n in ("gt", "lt", "ifpos")}
    return sum(1 for _ in sympy.preorder_traversal(sympy.sympify(formula, locals=names)))


def test_one_mujoco_task_end_to_end(tmp_path, capsys, monkeypatch):
    bench = load_script()
    out = tmp_path / "bench"
    doc = bench.main(["--out", str(out), "--budget", "2", "--tasks", "hopper", "--episodes", "3", "--",
                      "gp.population_size=12", "env.episode_length=50"])
    assert json.loads(capsys.readouterr().out) == json.loads((out / "bench_policies_mujoco.json").read_text())
    assert doc["backend"] == "mujoco" and doc["evogp_table_viii"]["returns"]["hopper"] == 2659
    png = out / "bench_policies_mujoco.png"
    assert doc["figure"] == str(png) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    [rec] = doc["records"]
    run = Path(rec["run_dir"])
    assert rec["returncode"] == 0 and "error" not in rec and "eval_error" not in rec, rec.get("error")
    assert (rec["task"], rec["seed"], rec["budget_s"], rec["population_size"]) == ("hopper", 0, 2.0, 12)
    # the trainer stops where one more generation, as long as the last, would end past the budget
    assert rec["stopped_by"] == "time_limit" and 1.0 <= rec["evolution_s"] <= 3.0
    # the process's clock covers the trainer's: imports before, validation and export after
    assert rec["wall_s"] > rec["elapsed_s"] >= rec["evolution_s"]

    metrics = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    curve = rec["curve"]
    assert ([p["generation"] for p in curve] == list(range(rec["generations"]))
            == [m["generation"] for m in metrics])
    assert [p["best_so_far"] for p in curve] == [m["best_so_far"] for m in metrics]
    assert curve[-1]["best_so_far"] == rec["best_train_return"]
    walls = [p["wall_s"] for p in curve]
    assert walls == sorted(walls) and 0 < walls[0] and walls[-1] <= rec["wall_s"]
    assert all(p["wall_s"] >= p["elapsed_s"] for p in curve)

    ev = rec["eval"]
    assert ev["simulator"] == "gymnasium" and ev["episode_length"] == 50 and ev["seed"] == bench.EVAL_SEED
    assert len(ev["returns"]) == ev["episodes"] == 3
    assert math.isclose(ev["mean"], sum(ev["returns"]) / 3, rel_tol=1e-12)
    assert all(math.isfinite(r) for r in ev["returns"]) and ev["std"] >= 0

    exported = json.loads((run / "policy.json").read_text())["formulas"]
    assert rec["formulas"] == exported and rec["formulas_match_export"]
    assert rec["nodes"] == {a: sympy_nodes(f) for a, f in exported.items()}
    assert rec["nodes_total"] == sum(rec["nodes"].values())

    # the same run directories again are refused, and so are overrides the script sets itself
    for extra in ([], ["--out", str(tmp_path / "other"), "--", "gp.time_limit=5"]):
        with pytest.raises(SystemExit):
            bench.main(["--out", str(out), "--tasks", "hopper", *extra])

    # --merge gathers the records of a document and of a grid.json (name -> document) without running
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"a": doc, "b": doc, "stopped": {"metrics": []}}))
    merged_out = tmp_path / "merged"
    bench.main(["--out", str(merged_out), "--merge", str(out / "bench_policies_mujoco.json"), f"{grid}:b"])
    merged = json.loads((merged_out / "bench_policies_mujoco.json").read_text())
    assert [r["source"] for r in merged["records"]] == [str(out / "bench_policies_mujoco.json"), f"{grid}:b"]
    assert all(r["eval"] == rec["eval"] and r["machine"] == doc["machine"] for r in merged["records"])
    assert merged["tasks"] == ["hopper"] and (merged_out / "bench_policies_mujoco.png").exists()
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"stopped": {"metrics": []}}))
    for bad, match in ((str(empty), "no bench_policies records"),
                       (f"{grid}:a,stopped", r"no finished run.*stopped")):
        with pytest.raises(SystemExit, match=match):
            bench.main(["--out", str(merged_out), "--merge", bad])

    # --resume continues the finished run from its last checkpoint (its end) to a larger budget: the earlier
    # points stay, the new ones follow them, and the processes' wall-clocks add up
    with pytest.raises(SystemExit):  # nothing to continue in another folder
        bench.main(["--out", str(tmp_path / "other"), "--tasks", "hopper", "--resume"])
    again = bench.main(["--out", str(out), "--budget", "4", "--tasks", "hopper", "--episodes", "3",
                        "--resume", "--", "gp.population_size=12", "env.episode_length=50"])
    [cont] = again["records"]
    assert cont["returncode"] == 0 and "error" not in cont and "eval_error" not in cont, cont.get("error")
    assert cont["segments_wall_s"][0] == rec["wall_s"] and cont["wall_s"] == sum(cont["segments_wall_s"])
    assert cont["generations"] > rec["generations"] and 2.0 < cont["evolution_s"] <= 5.0
    metrics = [json.loads(ln) for ln in (run / "metrics.jsonl").read_text().splitlines()]
    assert [p["generation"] for p in cont["curve"]] == list(range(cont["generations"])) == [
        m["generation"] for m in metrics]
    assert cont["curve"][:rec["generations"]] == rec["curve"]
    walls = [p["wall_s"] for p in cont["curve"]]
    assert walls == sorted(walls) and rec["wall_s"] < walls[rec["generations"]] <= cont["wall_s"]
    assert cont["curve"][-1]["best_so_far"] == cont["best_train_return"] and len(cont["eval"]["returns"]) == 3

    # the document is written before the replays: one stopped (a machine's limit) leaves a run to go on with
    def stopped(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "evaluate", stopped)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--out", str(out), "--budget", "6", "--tasks", "hopper", "--resume", "--",
                    "gp.population_size=12", "env.episode_length=50"])
    [saved] = json.loads((out / "bench_policies_mujoco.json").read_text())["records"]
    assert "eval" not in saved and saved["generations"] > cont["generations"]
    assert saved["segments_wall_s"][:2] == cont["segments_wall_s"] and len(saved["segments_wall_s"]) == 3


def test_a_run_cut_off_goes_on(tmp_path, capsys, monkeypatch):
    """The document is saved while a run trains: a bench process stopped mid-run (its machine gone) leaves the
    run's record so far, which --resume continues from the run's last checkpoint, the time it ran counted."""
    bench = load_script()
    monkeypatch.setattr(bench, "SAVE_EVERY_S", 0.2)
    out = tmp_path / "bench"
    doc_path = out / "bench_policies_mujoco.json"
    args = ["--out", str(out), "--budget", "5", "--tasks", "hopper", "--episodes", "2", "--",
            "gp.population_size=12", "env.episode_length=50", "checkpoint_every=1"]
    read_metrics, popen, started = bench.read_metrics, subprocess.Popen, []

    def run(*a, **k):
        started.append(popen(*a, **k))
        return started[-1]

    def cut_off(path):  # both processes end, as with their machine, once a record of 3 generations is saved
        rows = read_metrics(path)
        saved = json.loads(doc_path.read_text())["records"] if doc_path.exists() else []
        if any(len(r["curve"]) >= 3 for r in saved):
            started[-1].kill()
            started[-1].wait()
            raise RuntimeError("machine gone")
        return rows

    monkeypatch.setattr(subprocess, "Popen", run)
    monkeypatch.setattr(bench, "read_metrics", cut_off)
    with pytest.raises(RuntimeError, match="machine gone"):
        bench.main(args)
    monkeypatch.undo()
    [saved] = json.loads(doc_path.read_text())["records"]
    assert saved["running"] and saved["returncode"] is None and "eval" not in saved
    assert saved["wall_s"] > saved["curve"][-1]["wall_s"] > 0 and len(saved["curve"]) >= 3
    run = Path(saved["run_dir"])
    assert list((run / "checkpoints").glob("gen_*.pt")) and not (run / "summary.json").exists()

    # a run the document does not know, with files in its folder, is neither continued nor overwritten
    stray = out / "mujoco" / "swimmer" / "seed0"
    stray.mkdir(parents=True)
    (stray / "notes.txt").write_text("kept")
    with pytest.raises(SystemExit):
        bench.main(["--resume", *args[:6], "swimmer", *args[6:]])  # --tasks hopper swimmer
    assert f"no run with a checkpoint in ['{stray}']" in capsys.readouterr().err
    assert (stray / "notes.txt").read_text() == "kept"
    [cont] = bench.main(["--resume", *args])["records"]
    assert cont["returncode"] == 0 and "error" not in cont and "running" not in cont, cont.get("error")
    assert cont["segments_wall_s"][0] == saved["wall_s"] and cont["wall_s"] == sum(cont["segments_wall_s"])
    assert [p["generation"] for p in cont["curve"]] == list(range(cont["generations"]))
    assert cont["curve"][0] == saved["curve"][0] and cont["generations"] > len(saved["curve"])
    walls = [p["wall_s"] for p in cont["curve"]]
    assert walls == sorted(walls) and walls[-1] <= cont["wall_s"] and len(cont["eval"]["returns"]) == 2


def test_the_development_suite_reports_mean_and_worst_seed_against_its_targets(tmp_path, capsys):
    bench = load_script()
    out = tmp_path / "suite"
    doc = bench.main(["--out", str(out), "--suite", "dev", "--tasks", "Pendulum-v1", "--budget", "1",
                      "--seeds", "0", "1", "--episodes", "2", "--", "gp.population_size=16",
                      "task.validation_episodes=2"])
    capsys.readouterr()
    assert doc["backend"] == "auto" and doc["targets"] == {"Pendulum-v1": -160}
    summary = doc["summary"]["tasks"]
    for task, target in doc["targets"].items():
        runs = [r for r in doc["records"] if r["task"] == task]
        assert [r["seed"] for r in runs] == [0, 1] and all(r["returncode"] == 0 for r in runs)
        means = [r["eval"]["mean"] for r in runs]
        assert len(runs[0]["eval"]["returns"]) == 2 and runs[0]["eval"]["simulator"] == "gymnasium"
        s = summary[task]
        assert s["returns"] == means and s["worst"] == min(means) and s["target"] == target
        assert math.isclose(s["mean"], sum(means) / 2) and s["met"] == (s["mean"] >= target)
        assert s["actions"] == 2 * len(runs[0]["formulas"])
    sizes = sorted(n for r in doc["records"] for n in r["nodes"].values())
    assert doc["summary"]["median_nodes_per_action"] == sizes[len(sizes) // 2]
    assert (out / "bench_policies_auto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the seeds run side by side, one document each, merged: the suite's summary again
    parts = []
    for k, rec in enumerate(doc["records"]):
        parts.append(tmp_path / f"seed{k}.json")
        parts[-1].write_text(json.dumps({**doc, "records": [rec]}))
    merged = bench.main(["--out", str(tmp_path / "merged"), "--merge", *map(str, parts)])
    capsys.readouterr()
    again = json.loads((tmp_path / "merged" / "bench_policies_auto.json").read_text())
    assert len(merged["records"]) == 2 and again["targets"] == doc["targets"]
    assert again["summary"] == doc["summary"]
    with pytest.raises(SystemExit):  # a task outside the suite
        bench.main(["--out", str(tmp_path / "x"), "--suite", "dev", "--tasks", "Humanoid-v5"])
