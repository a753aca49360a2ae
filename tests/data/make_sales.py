#!/usr/bin/python3
"""Generates tests/data/sales.csv: an order export as a small shop's system
writes it, with the columns tabular data really has beside the numbers.

  order_id    SO-000001 ...          unique per row (an identifier)
  order_date  2023-01-02 09:14       date and time of day, rows in date order
  customer    "Lena Weber"           about 1,000 names, regulars repeat
  product     P-0001 ... P-0800      800 SKUs, Zipf-distributed (high cardinality)
  region      5 levels
  channel     web / store / phone
  quantity    1..12
  unit_price  per product, 2 decimals
  discount    0, 5, 10 or 20 (%)
  returned    yes / no               the label, about 9% yes (imbalanced)

Whether an order comes back depends on things a model can learn and carry
to future dates: the weekday (weekend orders), the season (November and
December gifts), the hour (late-night orders), the channel, the discount,
the quantity and the product for the frequently sold products. It does not
depend on the order id, the customer's name or the calendar day as such.

Deterministic (seeded); run it to regenerate the committed file:
  /usr/bin/python3 tests/data/make_sales.py > tests/data/sales.csv
"""
import csv
import datetime
import math
import random
import sys

rng = random.Random(20261123)
ROWS = 4000
START = datetime.datetime(2023, 1, 2)
DAYS = 730

first = ["Lena", "Jonas", "Mia", "Paul", "Emma", "Ben", "Hanna", "Luca", "Sofia", "Noah", "Lea", "Elias",
         "Marie", "Finn", "Clara", "Felix", "Anna", "Leon", "Ida", "Max", "Nora", "Tom", "Lina", "Jan",
         "Ella", "Oskar", "Maja", "Henry", "Frieda", "Karl", "Greta", "Emil"]
last = ["Weber", "Schmidt", "Mueller", "Fischer", "Wagner", "Becker", "Hoffmann", "Koch", "Richter", "Klein",
        "Wolf", "Neumann", "Schwarz", "Zimmer", "Braun", "Krueger", "Hofmann", "Hartmann", "Lange", "Werner",
        "Krause", "Lehmann", "Schmid", "Schulze", "Maier", "Koehler", "Herrmann", "Walter", "Kaiser", "Fuchs",
        "Peters", "Lang"]
customers = [f"{rng.choice(first)} {rng.choice(last)}" for _ in range(1000)]
regulars = customers[:60]

PRODUCTS = 800
zipf = [1.0 / (k + 1) ** 1.1 for k in range(PRODUCTS)]
price = [round(math.exp(rng.gauss(3.0, 0.8)), 2) for _ in range(PRODUCTS)]
# The 40 best sellers each have their own return tendency; the long tail
# shares one (too few orders each to learn anything from).
effect = [rng.gauss(0, 1.2) if k < 40 else 0.0 for k in range(PRODUCTS)]
regions = ["north", "south", "east", "west", "central"]
channels = ["web", "store", "phone"]

times = sorted(START + datetime.timedelta(days=rng.uniform(0, DAYS)) for _ in range(ROWS))

out = csv.writer(sys.stdout, lineterminator="\n")
out.writerow(["order_id", "order_date", "customer", "product", "region", "channel", "quantity",
              "unit_price", "discount", "returned"])
for i, t in enumerate(times):
    hour = int(rng.triangular(7, 24, 13)) % 24
    t = t.replace(hour=hour, minute=rng.randrange(60), second=0, microsecond=0)
    p = rng.choices(range(PRODUCTS), weights=zipf)[0]
    c = rng.choice(regulars) if rng.random() < 0.3 else rng.choice(customers)
    ch = rng.choices(channels, weights=[5, 3, 1])[0]
    q = min(12, 1 + int(rng.expovariate(0.45)))
    d = rng.choices([0, 5, 10, 20], weights=[6, 2, 1.5, 1])[0]
    weekend = t.weekday() >= 5
    gift = math.cos(2 * math.pi * (t.timetuple().tm_yday - 340) / 365.25)
    late = hour >= 21 or hour < 6
    logit = (-3.6 + 1.6 * weekend + 1.1 * gift + 1.3 * late + 0.9 * (ch == "web") + 0.06 * d +
             0.15 * (q - 2) + effect[p])
    returned = rng.random() < 1 / (1 + math.exp(-logit))
    out.writerow([f"SO-{i + 1:06d}", t.strftime("%Y-%m-%d %H:%M"), c, f"P-{p + 1:04d}",
                  rng.choice(regions), ch, q, f"{price[p]:.2f}", d, "yes" if returned else "no"])
