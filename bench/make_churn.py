#!/usr/bin/python3
"""Writes a synthetic customer-churn table, split 80/20, for the tabular bench.

    /usr/bin/python3 bench/make_churn.py TRAIN.csv TEST.csv ROWS [--seed N]

The table is made up (no real customers), shaped like the business tables
anneal is for: a customer id unique per row (an identifier the model must
leave out), a signup date, skewed numeric columns (monthly spend is
log-normal, support tickets Poisson), categorical columns of a few levels
(plan, channel, region) and one of a long tail (city, 400 levels, Zipf),
about 3% missing cells, and a label `churned` (yes/no, about 22% yes).

Whether a customer churns is drawn from a probability with thresholds and
interactions that trees find and a linear model does not (a price rise on
the basic plan, short tenure times many tickets, a few cities with a bad
service), plus noise: no model can score 1. The rows depend only on the
seed; the first 80% (by row) are the train split. Never commit what it
writes.
"""
import argparse
import datetime

import numpy as np

PLANS = ["basic", "standard", "premium", "family"]
CHANNELS = ["web", "store", "phone", "partner", "app"]
REGIONS = ["north", "south", "east", "west", "central", "coast", "mountain", "valley", "island", "metro"]
CITIES = 400
EPOCH = datetime.date(2019, 1, 1)
DAYS = 6 * 365  # signups from 2019 to the end of 2024
NOW = EPOCH + datetime.timedelta(days=DAYS)


def table(rows, seed):
    rng = np.random.default_rng(seed)
    plan = rng.choice(len(PLANS), rows, p=[0.4, 0.3, 0.2, 0.1])
    channel = rng.choice(len(CHANNELS), rows, p=[0.35, 0.2, 0.15, 0.1, 0.2])
    region = rng.integers(0, len(REGIONS), rows)
    zipf = 1.0 / np.arange(1, CITIES + 1) ** 1.1
    city = rng.choice(CITIES, rows, p=zipf / zipf.sum())
    signup = rng.integers(0, DAYS, rows)
    tenure_months = (DAYS - signup) / 30.44
    spend = np.exp(rng.normal(3.6 + 0.35 * plan, 0.5, rows))  # log-normal, by plan
    tickets = rng.poisson(0.4 + 1.5 * (channel == 2) + 0.02 * spend / 10, rows)
    logins = rng.gamma(2.0, 6.0, rows)
    discount = rng.choice([0.0, 5.0, 10.0, 20.0], rows, p=[0.6, 0.2, 0.15, 0.05])
    age = np.clip(rng.normal(41, 13, rows), 18, 90).round()

    # The churn probability's logit.
    logit = -1.3
    logit += 1.4 * ((plan == 0) & (signup > DAYS - 540))  # the basic plan's price rise
    logit += 0.9 * np.minimum(tickets, 4) * (tenure_months < 12)  # early trouble
    logit -= 0.8 * np.log1p(logins) - 1.5
    logit += 1.2 * np.isin(city, [3, 7, 11, 19])  # cities with a bad service
    logit -= 0.06 * discount
    logit += 0.7 * ((age < 25) & (channel == 4))
    logit += 0.5 * np.sin(2 * np.pi * signup / 365.25)  # signup season
    logit += rng.normal(0, 0.6, rows)
    churned = rng.random(rows) < 1 / (1 + np.exp(-logit))

    columns = {
        "customer_id": [f"C{1000000 + i}" for i in range(rows)],
        "signup_date": [(EPOCH + datetime.timedelta(days=int(d))).isoformat() for d in signup],
        "plan": [PLANS[p] for p in plan],
        "channel": [CHANNELS[c] for c in channel],
        "region": [REGIONS[r] for r in region],
        "city": [f"city{c:03d}" for c in city],
        "age": [f"{a:.0f}" for a in age],
        "monthly_spend": [f"{s:.2f}" for s in spend],
        "support_tickets": [str(t) for t in tickets],
        "logins_per_month": [f"{v:.1f}" for v in logins],
        "discount_pct": [f"{d:.0f}" for d in discount],
    }
    # About 3% of the cells of these columns are missing.
    for name in ("age", "monthly_spend", "logins_per_month", "channel", "city"):
        gone = rng.random(rows) < 0.03
        columns[name] = ["" if g else v for g, v in zip(gone, columns[name])]
    columns["churned"] = ["yes" if c else "no" for c in churned]
    return columns


def write(path, columns, lo, hi):
    names = list(columns)
    with open(path, "w", encoding="ascii", newline="") as out:
        out.write(",".join(names) + "\n")
        for i in range(lo, hi):
            out.write(",".join(columns[n][i] for n in names) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("train")
    parser.add_argument("test")
    parser.add_argument("rows", type=int)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    columns = table(args.rows, args.seed)
    cut = args.rows * 4 // 5
    write(args.train, columns, 0, cut)
    write(args.test, columns, cut, args.rows)


if __name__ == "__main__":
    main()
