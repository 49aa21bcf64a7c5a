"""Reading echo_train's metrics.jsonl, shared by sweep.py, plot.py and depth_report.py.

Each line of metrics.jsonl is one JSON object: a training step ({"step", "loss", "tokens_per_s",
...}), a validation ({"step", "val_loss"}) or, with a "kind" field, telemetry (kind "echo_site":
the per-site norms of the Echo paper's Eqns. 4-6). A resumed run logs the steps after its
checkpoint again; the last line of a step wins.
"""

import json
import math
import os

TAIL = 100  # steps in the "tail-100" mean, as in the Echo paper's Table 7


class MetricsError(Exception):
    """A metrics.jsonl that cannot be read or parsed; the message names the file and line."""


def read_metrics(path, missing_ok=False):
    """{'path', 'train': [dict], 'val': [dict], 'sites': {(direction, site): [(step, delta, s, x)]}},
    train and val sorted by step. A missing file is an error unless missing_ok (then all empty)."""
    train, val, sites = {}, {}, {}
    if missing_ok and not os.path.exists(path):
        return {"path": path, "train": [], "val": [], "sites": {}}
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    d = json.loads(line)
                except json.JSONDecodeError:
                    raise MetricsError(f"{path}:{n}: not a JSON line")
                if not isinstance(d, dict):
                    raise MetricsError(f"{path}:{n}: not a JSON object")
                if d.get("kind") == "echo_site":
                    key = (d["direction"], int(d["site"]))
                    sites.setdefault(key, {})[d["step"]] = (
                        d["step"], d["delta_norm"], d["partial_sum_norm"], d.get("x_norm", math.nan))
                elif d.get("kind"):
                    continue  # a kind this reader does not know yet
                elif "val_loss" in d:
                    val[d["step"]] = d
                elif "loss" in d:
                    train[d["step"]] = d
    except OSError as e:
        raise MetricsError(f"{path}: {e.strerror}")
    except (KeyError, TypeError, ValueError) as e:
        raise MetricsError(f"{path}: a telemetry line lacks a field or has a bad one ({e})")
    return {"path": path, "train": [train[s] for s in sorted(train)], "val": [val[s] for s in sorted(val)],
            "sites": {k: [v[s] for s in sorted(v)] for k, v in sites.items()}}


def tail_mean(train, tail=TAIL):
    """Mean training loss over the last `tail` steps (train: the dicts of read_metrics)."""
    if not train:
        return None
    last = train[-1]["step"]
    xs = [d["loss"] for d in train if d["step"] > last - tail]
    return sum(xs) / len(xs)


def mean_std(xs):
    """(mean, sample std or None for one value, n) of the values that are not None."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None, 0
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, None, len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)), len(xs)
