"""The open-loop probe's final 8 strokes (its last JSON line) on 64 fresh starts each: mean reward a step over steps
200-400 (x 1000) and the return of the first 200 steps; appends one JSON line to the probe's output."""
import json, sys
import numpy as np
sys.argv = [sys.argv[0], "0"]
src = open("results/policy_brax_swimmer_strokes/swimmer_open_loop_probe.py").read().split("rng = np.random")[0]
exec(src)
last = [json.loads(l) for l in open("results/policy_brax_swimmer_strokes/swimmer_open_loop_probe.jsonl")][-1]
best = np.array(last["params"])
R = run(np.repeat(best, 64, 0), 400, 11)
s = (R[:, 200:400].mean(1) * 1000).reshape(8, 64)
print(json.dumps({"check": "the final 8 strokes on 64 fresh starts each, mean reward a step over steps 200-400 x 1000",
                  "mean": [round(float(x), 2) for x in s.mean(1)], "sem": [round(float(x), 2) for x in s.std(1) / 8],
                  "first_200_return": [round(float(x), 1) for x in R[:, :200].sum(1).reshape(8, 64).mean(1)]}))
