"""Replay the policies of runs trained with a raised ``reset_noise_scale`` on the environment's own noise.

``scripts/bench_policies.py`` plays an exported policy with the keyword arguments it was trained with; a run
given ``env.kwargs={reset_noise_scale: ...}`` to train on wider initial states is judged here on the standard
ones instead: 10 fresh episodes (Gymnasium v5 for MuJoCo runs, Brax for Brax runs), as the benchmark plays
them.

Usage: python scripts/dev/replay_own_noise.py GRID_DIR OUT.json
  GRID_DIR: the runs' folder of ``scripts/dev/gpu_policy_grid.sh`` (``/tmp/grid``: one folder per run name).
"""

from __future__ import annotations

import copy
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bench_policies as bench


def replay(run_dir: Path, record: dict, kwargs: dict, episodes: int = 10) -> list[float]:
    if "pipeline" in kwargs:  # a Brax run: its policy.json with the kwargs replaced
        with tempfile.TemporaryDirectory() as tmp:
            changed = copy.deepcopy(record)
            changed["meta"]["env_kwargs"] = kwargs
            (Path(tmp) / "policy.json").write_text(json.dumps(changed))
            return bench.evaluate_brax(Path(tmp), episodes, bench.EVAL_SEED)["returns"]
    replayer = bench.load_replay()
    policy = replayer.load_policy(run_dir)
    meta = {**json.loads(policy.META), "env_kwargs": kwargs}
    return replayer.replay_gymnasium(policy, meta, episodes, bench.EVAL_SEED, int(meta["episode_length"]))


def main(grid: Path, out: Path) -> None:
    results = {}
    for path in sorted(grid.glob("*/**/policy.json")):
        record = json.loads(path.read_text())
        kwargs = dict(record["meta"].get("env_kwargs") or {})
        if kwargs.pop("reset_noise_scale", None) is None:
            continue
        name = path.relative_to(grid).parts[0]
        try:
            returns = replay(path.parent, record, kwargs)
            mean, std = bench.mean_std(returns)
            results[name] = {"mean": mean, "std": std, "returns": returns}
        except Exception as exc:  # noqa: BLE001  report it and go on with the other runs
            results[name] = {"error": repr(exc)}
        print(name, results[name].get("mean"), flush=True)
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
