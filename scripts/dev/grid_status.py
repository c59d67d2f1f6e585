"""Where the runs of a ``gpu_policy_grid.sh`` grid stand: per run of its spec, the last generation's line
(generation, trainer's clock, best training return so far, episode length) and, once replayed, the exported
policy's evaluation.

    python3 scripts/dev/grid_status.py OUT [--wait SECONDS]

OUT: the grid's ``--out`` folder (its ``spec.txt`` names the runs; each run's files are under
``/tmp/grid/<name>``). ``--wait`` first waits up to SECONDS for a detached grid to end (``OUT/exit_status``).
"""

from __future__ import annotations

import argparse
import glob
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench_policies import read_metrics  # the runs' driver: one reader of metrics.jsonl

RUNS = Path("/tmp/grid")


def run_line(name: str) -> str:
    line = name
    for path in glob.glob(str(RUNS / name / "*/*/*/metrics.jsonl")):
        rows = read_metrics(Path(path))
        if rows:
            r = rows[-1]
            line += (f"  generation {r['generation']}  {r['elapsed_s']:.0f} s  best {r['best_so_far']:.1f}"
                     f"  episode {r.get('episode_length', '?')}")
    for path in glob.glob(str(RUNS / name / "bench_policies_*.json")):
        for rec in json.loads(Path(path).read_text())["records"]:
            ev = rec.get("eval") or {}
            val = rec.get("validation_return")
            line += f"  | wall {rec['wall_s']:.0f} s" + (f"  validation {val:.1f}" if val is not None else "")
            if ev:
                line += f"  exported {ev['mean']:.1f} ± {ev['std']:.1f}"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS")
    args = parser.parse_args()
    spec = args.out / "spec.txt"
    if not spec.exists():  # no grid was started in OUT on this machine: nothing to wait for
        sys.exit(f"grid_status.py: {args.out} holds no grid ({spec} missing): start one first")
    status = args.out / "exit_status"
    end = time.monotonic() + args.wait
    while not status.exists() and time.monotonic() < end:
        time.sleep(5)
    state = f"ended (exit status {status.read_text().strip()})" if status.exists() else "no exit status yet"
    print(f"grid {args.out}: {state}, {time.strftime('%H:%M:%S')}")
    names = [ln.split()[0] for ln in spec.read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    for name in names:
        print(run_line(name))


if __name__ == "__main__":
    main()
