#!/usr/bin/python3
"""The peers of the tabular benchmark (bench/tabular.sh) on one table's fixed split.

    /usr/bin/python3 bench/tabular_peers.py TRAIN.csv TEST.csv LABEL classification|regression [--threads 2]

Prints one JSON object: for each peer (logreg, mlp, xgboost) its test score
(`score`: accuracy, or R² for regression), `balanced_accuracy` for
classification, and `seconds` (fit and predict, preprocessing included).

The setup is the one bench/data/tabular/README.md gives for anchors.json:
numeric columns median-imputed and standardized, categorical columns (any
value that is not a number) most-frequent-imputed and one-hot encoded;
scikit-learn LogisticRegression(max_iter=3000) or Ridge(),
MLPClassifier/MLPRegressor(hidden_layer_sizes=(64,), early_stopping=True,
random_state=0, max_iter=1000) and XGBClassifier/XGBRegressor(n_estimators=300,
learning_rate=0.1, tree_method='hist', random_state=0). An empty cell (or
NA) is missing, as pandas reads it. Two steps a data scientist takes on a
business table, which none of the mlbench tables needs: a non-numeric
column whose training values are all distinct (a customer id) is dropped,
and a column of ISO dates (YYYY-MM-DD) becomes three numeric columns (days
since 1970, month, day of week), median-imputed and standardized as the
others. Every peer is held to --threads threads
(BLAS and OpenMP pools, XGBoost's nthread), as anneal is in the bench.

max_iter=1000 for the MLP (--mlp-max-iter): anchors.json's MLPRegressor
figures are what it gives (BostonHousing2 R² 0.7878 after 626 iterations,
Ozone 0.6706 after 250); scikit-learn's default of 200 stops the regressors
before they converge (BostonHousing2 0.4720, Ozone 0.6607). Every
MLPClassifier here stops early well before 200, so they are unchanged.
"""
import argparse
import csv
import datetime
import json
import os
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train")
    parser.add_argument("test")
    parser.add_argument("label")
    parser.add_argument("task", choices=["classification", "regression"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--mlp-max-iter", type=int, default=1000)
    args = parser.parse_args()

    # The thread pools are sized when numpy/scipy load: cap them first.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import warnings

    import numpy as np
    from sklearn.compose import ColumnTransformer
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, r2_score
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    from sklearn.pipeline import Pipeline, make_pipeline
    from sklearn.preprocessing import LabelEncoder, OneHotEncoder, StandardScaler
    import xgboost

    # A peer that does not converge is scored as it stands (as the anchors were).
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    missing = {"", "NA", "NaN", "nan"}

    def read(path):
        with open(path, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        return rows[0], rows[1:]

    header, train_rows = read(args.train)
    test_header, test_rows = read(args.test)
    if test_header != header:
        sys.exit(f"{args.test}: the header differs from {args.train}'s")
    if args.label not in header:
        sys.exit(f"{args.train}: no column '{args.label}'")
    li = header.index(args.label)
    features = [i for i in range(len(header)) if i != li]

    def is_number(text):
        try:
            float(text)
            return True
        except ValueError:
            return False

    # A column is numeric when every non-missing value of the train split is
    # a number (pandas' inference on the file).
    numeric = [i for i in features if all(r[i] in missing or is_number(r[i]) for r in train_rows)]

    def is_date(text):
        try:
            return len(text) == 10 and datetime.date.fromisoformat(text) is not None
        except ValueError:
            return False

    dates = [i for i in features if i not in numeric
             and any(r[i] not in missing for r in train_rows)
             and all(r[i] in missing or is_date(r[i]) for r in train_rows)]
    identifiers = [i for i in features if i not in numeric and i not in dates
                   and len({r[i] for r in train_rows}) == len(train_rows)]
    features = [i for i in features if i not in identifiers]
    categorical = [i for i in features if i not in numeric and i not in dates]

    def date_parts(text):
        if text in missing or not is_date(text):
            return [np.nan] * 3
        d = datetime.date.fromisoformat(text)
        return [float((d - datetime.date(1970, 1, 1)).days), float(d.month), float(d.weekday())]

    # The matrix's columns: each feature column, then each date's three parts.
    def matrix(rows):
        x = np.empty((len(rows), len(features) + 3 * len(dates)), dtype=object)
        for k, i in enumerate(features):
            for n, r in enumerate(rows):
                v = r[i]
                if v in missing or i in dates:
                    x[n, k] = np.nan
                elif i in numeric:
                    x[n, k] = float(v) if is_number(v) else np.nan
                else:
                    x[n, k] = v
        for j, i in enumerate(dates):
            for n, r in enumerate(rows):
                x[n, len(features) + 3 * j:len(features) + 3 * j + 3] = date_parts(r[i])
        return x

    x_train, x_test = matrix(train_rows), matrix(test_rows)
    num_cols = [features.index(i) for i in numeric] + list(range(len(features), len(features) + 3 * len(dates)))
    cat_cols = [features.index(i) for i in categorical]

    def preprocess():
        parts = []
        if num_cols:
            parts.append(("num", make_pipeline(SimpleImputer(strategy="median"), StandardScaler()), num_cols))
        if cat_cols:
            parts.append(("cat", make_pipeline(SimpleImputer(strategy="most_frequent"),
                                               OneHotEncoder(handle_unknown="ignore")), cat_cols))
        return ColumnTransformer(parts)

    classification = args.task == "classification"
    if classification:
        encoder = LabelEncoder().fit([r[li] for r in train_rows])
        known = set(encoder.classes_)
        y_train = encoder.transform([r[li] for r in train_rows])
        # A class only the test split has is never predicted: -1 is always wrong.
        y_test = np.array([encoder.transform([r[li]])[0] if r[li] in known else -1 for r in test_rows])
        peers = {
            "logreg": LogisticRegression(max_iter=3000),
            "mlp": MLPClassifier(hidden_layer_sizes=(64,), early_stopping=True, random_state=0,
                                 max_iter=args.mlp_max_iter),
            "xgboost": xgboost.XGBClassifier(n_estimators=300, learning_rate=0.1, tree_method="hist",
                                             random_state=0, n_jobs=args.threads),
        }
    else:
        y_train = np.array([float(r[li]) for r in train_rows])
        y_test = np.array([float(r[li]) for r in test_rows])
        peers = {
            "logreg": Ridge(),
            "mlp": MLPRegressor(hidden_layer_sizes=(64,), early_stopping=True, random_state=0,
                                max_iter=args.mlp_max_iter),
            "xgboost": xgboost.XGBRegressor(n_estimators=300, learning_rate=0.1, tree_method="hist",
                                            random_state=0, n_jobs=args.threads),
        }

    out = {"rows_train": len(train_rows), "rows_test": len(test_rows), "numeric_columns": len(num_cols),
           "categorical_columns": len(cat_cols), "date_columns": len(dates),
           "identifier_columns": len(identifiers), "threads": args.threads}
    for name, model in peers.items():
        start = time.perf_counter()
        pipe = Pipeline([("prep", preprocess()), ("model", model)]).fit(x_train, y_train)
        pred = pipe.predict(x_test)
        seconds = time.perf_counter() - start
        if classification:
            result = {"score": float(accuracy_score(y_test, pred)),
                      "balanced_accuracy": float(balanced_accuracy_score(y_test, pred))}
        else:
            result = {"score": float(r2_score(y_test, pred))}
        result["seconds"] = seconds
        if getattr(pipe[-1], "n_iter_", None) is not None:  # Ridge's solver reports none
            result["iterations"] = int(np.max(pipe[-1].n_iter_))
        out[name] = result
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
