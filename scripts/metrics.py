"""Reading echo_train's metrics.jsonl, shared by sweep.py, plot.py and depth_report.py.

Each line of metrics.jsonl is one JSON object: a training step ({"step", "loss", "tokens_per_s",
...}), a validation ({"step", "val_loss"}) or, with a "kind" field, telemetry (kind "echo_site":
the per-site norms of the Echo paper's Eqns. 4-6). A resumed run logs the steps after its
checkpoint again; the last line of a step wins. Every field a reader uses is checked here, so a
damaged file is one MetricsError naming FILE:LINE and the field, never a traceback in a caller.
"""

import json
import math
import os
import stat
import sys

TAIL = 100  # steps in the "tail-100" mean, as in the Echo paper's Table 7

# The fields each kind of line must have, and their kinds; x_norm of a site line is optional.
# A loss must be finite: Python's json reads NaN and Infinity, and a mean, a plot or a "finished"
# result of one is meaningless (echo_train stops on a non-finite training loss).
TRAIN_FIELDS = {"step": "int", "loss": "finite", "tokens_per_s": "number"}
VAL_FIELDS = {"step": "int", "val_loss": "finite"}
SITE_FIELDS = {"step": "int", "direction": "text", "site": "int", "delta_norm": "number",
               "partial_sum_norm": "number"}


class MetricsError(Exception):
    """A metrics.jsonl that cannot be read or parsed; the message names the file and line."""


class NonFiniteLoss(MetricsError):
    """A loss line whose loss is NaN or infinite: the run diverged (or the line was edited); the
    message names the file and line. A MetricsError, so a caller that does not tell them apart
    still refuses it."""


def is_kind(value, kind):
    # bool is an int to Python but never a step or a loss; null is no number either.
    if isinstance(value, bool):
        return False
    if kind == "int":
        return isinstance(value, int) and value >= 0
    if kind in ("number", "finite"):
        return isinstance(value, (int, float))  # "finite" is checked by check_fields, with its own error
    return isinstance(value, str)


KIND_WORDS = {"int": "a non-negative integer", "number": "a number", "finite": "a number", "text": "a string"}


def shown(value):
    """A value for a message, as JSON; an integer too long to read is cut (JSON has no size limit)."""
    text = json.dumps(value)
    unit = "digits" if isinstance(value, int) else "characters"
    return text if len(text) <= 40 else f"{text[:12]}... ({len(text)} {unit})"


# An integer beyond a double (a JSON integer of 309+ digits) made math.isfinite and every float()
# after it an OverflowError traceback; a step or site beyond 64 bits is none echo_train writes (and
# matplotlib cannot place it on an axis).
INT_LIMIT = 2 ** 64


def check_fields(d, fields, where, what):
    for name, kind in fields.items():
        if name not in d:
            raise MetricsError(f"{where}: a {what} line lacks '{name}'")
        value = d[name]
        if isinstance(value, int) and not isinstance(value, bool):
            if kind == "int" and value >= INT_LIMIT:
                raise MetricsError(f"{where}: '{name}' of a {what} line is {shown(value)}, beyond 2^64")
            if kind in ("number", "finite") and abs(value) > sys.float_info.max:
                error = NonFiniteLoss if kind == "finite" else MetricsError
                raise error(f"{where}: '{name}' of a {what} line is {shown(value)}, not a finite number"
                            + (" (the run diverged)" if kind == "finite" else ""))
        if kind == "finite" and d[name] is None:
            # nlohmann's dump (echo_train's metrics log) writes a NaN or infinite double as null.
            raise NonFiniteLoss(f"{where}: '{name}' of a {what} line is null (how echo_train writes a NaN or "
                                "infinite loss), not a finite number (the run diverged)")
        if not is_kind(d[name], kind):
            raise MetricsError(f"{where}: '{name}' of a {what} line is {shown(d[name])}, "
                               f"not {KIND_WORDS[kind]}")
        if kind == "finite" and not math.isfinite(d[name]):
            raise NonFiniteLoss(f"{where}: '{name}' of a {what} line is {json.dumps(d[name])}, not a finite "
                                "number (the run diverged)")


def parse_line(raw, where):
    """The JSON object of one line (bytes), or None for a blank line."""
    try:
        line = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise MetricsError(f"{where}: not UTF-8 text")
    if not line:
        return None
    try:
        d = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
        raise MetricsError(f"{where}: not a JSON line")
    if not isinstance(d, dict):
        raise MetricsError(f"{where}: not a JSON object")
    return d


def read_metrics(path, missing_ok=False, cut_ok=False):
    """{'path', 'train': [dict], 'val': [dict], 'sites': {(direction, site): [(step, delta, s, x)]},
    'cut_line': N or None}, train and val sorted by step. A missing file is an error unless
    missing_ok (then all empty); anything but a regular file is an error. With cut_ok, a last line
    without its newline that does not parse (a run killed while writing it) is left out and its
    number returned as cut_line; any other bad line is an error."""
    train, val, sites = {}, {}, {}
    cut_line = None
    if missing_ok and not os.path.exists(path):
        return {"path": path, "train": [], "val": [], "sites": {}, "cut_line": None}
    try:
        # Before open(): a FIFO there (no writer) blocked it forever; a device could be endless.
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise MetricsError(f"{path}: not a regular file")
        with open(path, "rb") as f:
            lines = f.readlines()
    except OSError as e:
        raise MetricsError(f"{path}: {e.strerror}")
    for n, raw in enumerate(lines, 1):
        where = f"{path}:{n}"
        try:
            d = parse_line(raw, where)
        except MetricsError:
            if cut_ok and n == len(lines) and not raw.endswith(b"\n"):
                cut_line = n
                break
            raise
        if d is None:
            continue
        kind = d.get("kind")
        if kind == "echo_site":
            check_fields(d, SITE_FIELDS, where, "telemetry (echo_site)")
            x_norm = d.get("x_norm", math.nan)
            if not is_kind(x_norm, "number"):
                raise MetricsError(f"{where}: 'x_norm' of a telemetry (echo_site) line is "
                                   f"{json.dumps(x_norm)}, not a number")
            sites.setdefault((d["direction"], d["site"]), {})[d["step"]] = (
                d["step"], d["delta_norm"], d["partial_sum_norm"], x_norm)
        elif kind is not None:
            continue  # a kind this reader does not know yet
        elif "val_loss" in d:
            check_fields(d, VAL_FIELDS, where, "validation")
            val[d["step"]] = d
        elif "loss" in d:
            check_fields(d, TRAIN_FIELDS, where, "training")
            train[d["step"]] = d
        # Any other line (no loss, val_loss or kind) is not one this reader knows: skipped.
    return {"path": path, "train": [train[s] for s in sorted(train)], "val": [val[s] for s in sorted(val)],
            "sites": {k: [v[s] for s in sorted(v)] for k, v in sites.items()}, "cut_line": cut_line}


def tail_mean(train, tail=TAIL):
    """Mean training loss over the last `tail` steps (train: the dicts of read_metrics)."""
    if not train:
        return None
    last = train[-1]["step"]
    xs = [d["loss"] for d in train if d["step"] > last - tail]
    return sum(xs) / len(xs)


def mean_std(xs):
    """(mean, sample std or None for one value, n) of the values that are not None. Huge values
    (beyond 1e150, whose squares may overflow) are divided by the largest magnitude first, so
    finite values near the float limit (1e308) give a finite mean, not an OverflowError from the
    squares; a std beyond the limit is inf."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None, 0
    scale = max(abs(x) for x in xs)
    if not 1e150 < scale < math.inf:
        scale = 1.0  # the usual values keep their exact sums; inf or nan go through as they are
    ys = [x / scale for x in xs]
    m = sum(ys) / len(ys)
    if len(ys) < 2:
        return m * scale, None, len(ys)
    return m * scale, math.sqrt(sum((y - m) ** 2 for y in ys) / (len(ys) - 1)) * scale, len(ys)
