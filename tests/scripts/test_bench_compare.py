"""scripts/bench_compare.py at tiny sizes (gprl only, CPU): the JSON document keeps its shape."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_compare.py"


def run(tmp_path, *args):
    spec = importlib.util.spec_from_file_location("bench_compare", SCRIPT)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # in-process: the script's own main() with its own argument parsing
    out = tmp_path / "out.json"
    bench.main(["--engines", "gprl", "--device", "cpu", "--quiet", "--out", str(out), *args])
    return json.loads(out.read_text())


def test_grid_runs_and_merge_shape(tmp_path):
    doc = run(tmp_path, "--pop", "20", "40", "--rows", "60", "100", "--budget", "0.2", "--repeats", "2",
              "--generations", "2", "--run-pop", "30", "--feynman-rows", "200",
              "--plot", str(tmp_path / "p.png"))
    assert doc["benchmark"] == "compare" and doc["machine"]["threads"] >= 1
    assert doc["versions"]["gprl"] and doc["versions"]["torch"]
    grid = doc["grid"]["results"]
    assert {(r["P"], r["D"]) for r in grid} == {(20, 60), (20, 100), (40, 60), (40, 100)}
    for r in grid:
        assert r["engine"] == "gprl" and r["device"] == "cpu"
        assert r["gpops"] > 0 and r["seconds"] > 0 and 5 < r["mean_size"] < 100
        assert abs(r["gpops"] - r["P"] * r["mean_size"] * r["D"] / r["seconds"]) <= 0.01 * r["gpops"]
    runs = doc["runs"]["results"]
    assert [r["dataset"] for r in runs] == ["pagie_1", "feynman_I_9_18"]
    for r in runs:
        assert r["generations"] == 2 and r["population"] == 30 and r["train_mse"] >= 0 and r["test_mse"] >= 0
        assert r["gpops"] > 0 and r["seconds"] > 0
    assert runs[1]["train_rows"] == 200
    assert doc["cpu_vs_pyoperon"]["cells"] == []  # pyoperon was not run
    assert (tmp_path / "p.png").stat().st_size > 0

    # a second document merged in: its rows are added once, marked with their source
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**doc,
                                 "grid": {"results": [{**grid[0], "engine": "pyoperon", "gpops": 1.0}]},
                                 "runs": {"results": []}}))
    merged = run(tmp_path, "--no-grid", "--no-runs", "--merge", str(other))
    assert [(r["engine"], r["source"]) for r in merged["grid"]["results"]] == [("pyoperon", str(other))]
    assert merged["merged_from"][0]["file"] == str(other)
