"""Symbolic regression and classification quality on a GPU (or any device); writes one JSON document (--out).

* Feynman I.9.18 with 100,000 training rows (+25,000 held out): MSE (train and test) of the chosen model
  against the EvoGP paper's 7.2e-4 at population 5,000, and the wall clock of the fit.
* Held-out accuracy on breast_cancer and wine (scikit-learn's data, stratified 75/25 splits), several seeds;
  ``--cls-ensemble K`` averages K independently evolved formulas (``SymbolicClassifier(ensemble_size=K)``).
  ``--fit-all-rows``: EvoGP's protocol instead (its ``Classification`` problem scores the trees on every row
  of the dataset, with no held-out rows): fit on all rows and report the accuracy on them.

    python scripts/bench_estimators.py --device cuda --out gpu_out/bench_estimators.json
    python scripts/bench_estimators.py --device cuda --only breast_cancer wine --cls-ensemble 10  # 10 x 5k
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd
import torch
from sklearn.metrics import accuracy_score, mean_squared_error

import gprl
from gprl.sr.estimators import resolve_device


def feynman(args) -> dict:
    data = gprl.datasets.load("feynman_I_9_18", n_samples=125_000, test_size=0.2, seed=0)
    X_train = pd.DataFrame(data.X_train, columns=data.feature_names)
    X_test = pd.DataFrame(data.X_test, columns=data.feature_names)
    model = gprl.SymbolicRegressor(population_size=5000, generations=args.feynman_generations,
                                   time_limit=args.feynman_seconds, target_loss=args.target_mse / 10,
                                   model_selection="accuracy", random_state=0, device=args.device)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    model.fit(X_train, data.y_train)
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    test_mse = mean_squared_error(data.y_test, model.predict(X_test))
    train_mse = mean_squared_error(data.y_train, model.predict(X_train))
    return {"dataset": "feynman_I_9_18", "train_rows": len(X_train), "test_rows": len(X_test),
            "population_size": 5000, "generations_run": model.n_generations_, "fit_seconds": seconds,
            "train_mse": train_mse, "test_mse": test_mse, "target_mse": args.target_mse,
            "passes": bool(test_mse <= args.target_mse and train_mse <= args.target_mse),
            "formula": str(model.sympy()), "complexity": int(model.equations_.complexity[model.best_index_])}


def classification(name: str, args) -> dict:
    runs = []
    options = {"population_size": args.cls_population, "generations": args.cls_generations,
               "ensemble_size": args.cls_ensemble, **json.loads(args.cls_options)}  # --cls-options wins
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        data = gprl.datasets.load(name, seed=seed)
        X_train, y_train, X_test, y_test = data.X_train, data.y_train, data.X_test, data.y_test
        if args.fit_all_rows:
            X_train = X_test = np.concatenate([X_train, X_test])
            y_train = y_test = np.concatenate([y_train, y_test])
        model = gprl.SymbolicClassifier(random_state=seed, device=args.device, **options)
        start = time.perf_counter()
        model.fit(X_train, y_train)
        seconds = time.perf_counter() - start
        acc = accuracy_score(y_test, model.predict(X_test))
        runs.append({"seed": seed, "test_accuracy": acc, "fit_seconds": seconds,
                     "train_accuracy": accuracy_score(y_train, model.predict(X_train)),
                     "generations_run": model.n_generations_,
                     # nodes of the model: the sum over the ensemble's members
                     "complexity": int(model.equations_.complexity.iloc[model.members_].sum())})
    accs = [r["test_accuracy"] for r in runs]
    return {"dataset": name, "fit_all_rows": args.fit_all_rows, "population_size": options["population_size"],
            "generations": options["generations"], "options": options,
            "mean_test_accuracy": float(np.mean(accs)), "min_test_accuracy": float(np.min(accs)),
            "target_accuracy": 0.97, "passes_mean": bool(np.mean(accs) >= 0.97), "runs": runs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="auto")
    p.add_argument("--out", default="bench_estimators.json")
    p.add_argument("--target-mse", type=float, default=7.2e-4)
    p.add_argument("--feynman-generations", type=int, default=3000)
    p.add_argument("--feynman-seconds", type=float, default=150.0)
    p.add_argument("--cls-population", type=int, default=5000)
    p.add_argument("--cls-generations", type=int, default=200)
    p.add_argument("--cls-ensemble", type=int, default=1, help="SymbolicClassifier ensemble_size")
    p.add_argument("--seeds", type=int, default=5, help="number of train/test splits (and estimator seeds)")
    p.add_argument("--first-seed", type=int, default=0, help="splits first-seed ... first-seed + seeds - 1")
    p.add_argument("--cls-options", default="{}", help="JSON of extra SymbolicClassifier parameters")
    p.add_argument("--only", nargs="+", default=["feynman", "breast_cancer", "wine"])
    p.add_argument("--fit-all-rows", action="store_true",
                   help="classification: fit on every row and score those rows (EvoGP's protocol)")
    args = p.parse_args()
    args.device = str(resolve_device(args.device))
    result = {"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
              "torch": torch.__version__}
    if "feynman" in args.only:
        result["feynman"] = feynman(args)
        print(json.dumps(result["feynman"]), flush=True)
    for name in [n for n in ("breast_cancer", "wine") if n in args.only]:
        result[name] = classification(name, args)
        print(json.dumps({k: v for k, v in result[name].items() if k != "runs"}), flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
