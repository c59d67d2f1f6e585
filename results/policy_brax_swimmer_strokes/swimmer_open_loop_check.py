"""The open-loop probe's final 8 strokes (the ``params`` of its output's last line) on 64 fresh starts each:
mean reward a step over steps 200-400 (x 1000) and the return of the first 200 steps, one JSON line.
``python swimmer_open_loop_check.py swimmer_open_loop_probe.jsonl``"""

import json
import sys

import numpy as np
from swimmer_open_loop_probe import run

with open(sys.argv[1]) as f:
    last = [r for r in map(json.loads, f) if "params" in r][-1]
R = run(np.repeat(np.array(last["params"]), 64, 0), 400, 11)
s = (R[:, 200:400].mean(1) * 1000).reshape(8, 64)
what = "the final 8 strokes on 64 fresh starts each, mean reward a step over steps 200-400 x 1000"
first = R[:, :200].sum(1).reshape(8, 64).mean(1)
print(json.dumps({"check": what, "mean": [round(float(x), 2) for x in s.mean(1)],
                  "sem": [round(float(x), 2) for x in s.std(1) / 8],
                  "first_200_return": [round(float(x), 1) for x in first]}))
