"""Linear and other scikit-learn references on the classification splits of ``sr_check.py``: held-out
accuracy over stratified 75/25 splits (``gprl.datasets.load(name, seed=s)``), standardised features.

Sparse (L1) logistic regression at several C shows how many of the features a linear model needs for a given
accuracy: the yardstick for one short formula over a few features. Writes one JSON document (--out).

    python scripts/dev/classification_reference.py --seeds 20 --out classification_reference.json
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

import gprl

L1_C = (0.05, 0.1, 0.2, 0.5, 1.0, 3.0)


def models(seed: int) -> dict:
    out = {"logistic_l2_C1": LogisticRegression(C=1.0, max_iter=5000),
           "svm_rbf": SVC(), "random_forest": RandomForestClassifier(random_state=seed)}
    for c in L1_C:
        out[f"logistic_l1_C{c:g}"] = LogisticRegression(C=c, l1_ratio=1.0, solver="saga", max_iter=20000)
    return out


def reference(name: str, seeds: range) -> dict:
    acc: dict[str, list[float]] = {}
    features: dict[str, list[int]] = {}
    for seed in seeds:
        data = gprl.datasets.load(name, seed=seed)
        scaler = StandardScaler().fit(data.X_train)
        X_train, X_test = scaler.transform(data.X_train), scaler.transform(data.X_test)
        for key, model in models(seed).items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # saga's convergence notes on the smallest C
                model.fit(X_train, data.y_train)
            acc.setdefault(key, []).append(float((model.predict(X_test) == data.y_test).mean()))
            if hasattr(model, "coef_"):  # features with a nonzero weight for any class
                features.setdefault(key, []).append(int((model.coef_ != 0).any(axis=0).sum()))
    return {key: {"mean_test_accuracy": round(float(np.mean(a)), 4), "min_test_accuracy": float(np.min(a)),
                  **({"median_features": float(np.median(features[key]))} if key in features else {})}
            for key, a in acc.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=20, help="number of train/test splits")
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--only", nargs="+", default=["breast_cancer", "wine"])
    p.add_argument("--out", default="classification_reference.json")
    args = p.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    result = {"seeds": [seeds.start, seeds.stop - 1], "datasets": {}}
    for name in args.only:
        result["datasets"][name] = reference(name, seeds)
        print(json.dumps({name: result["datasets"][name]}), flush=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
