#!/usr/bin/python3
"""Tabulates and plots the depth study of docs/results.md (scripts/depth_study.sh).

    scripts/depth_report.py OUT_ROOT [--baseline bf16]

OUT_ROOT holds one folder per setting (bf16, echo4, nocomp4, echo8, or any other name), each
holding the sweep points `layers=L_seed=S` with their metrics.jsonl. For every setting and depth
it takes the last validation loss of each finished seed, and the gap to the baseline setting in
percent, paired by seed: (val - val_baseline) / val_baseline of the same seed and depth, so the
data order and initial weights, which the seed fixes, cancel. Writes OUT_ROOT/depth-gap.md (two
tables: validation loss and gap, mean +- sample std over seeds) and OUT_ROOT/depth-gap.png (gap
against depth, one line per setting, error bars one std). A run counts as finished when its
last training step and its last validation are both at train.steps of its config.yaml (the
effective config echo_train writes); unfinished runs, and runs whose metrics.jsonl or config.yaml
cannot be read (not a regular file, such as a FIFO, included), are listed with the reason and
left out: "final evaluation missing" for a run at its last step without the validation
echo_train owes there (train.eval_interval divides
train.steps: a stop signal during that evaluation; echo_train --resume runs it), "diverged" for
a NaN or infinite loss. Finished runs of different train.steps are refused, naming the folders:
give each length its own OUT_ROOT; so are two folders of one setting that are one layers and
seed (layers=02 and layers=2), naming both.
"""

import argparse
import math
import os
import re
import sys

import matplotlib
import yaml

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from metrics import MetricsError, NonFiniteLoss, mean_std, read_metrics  # noqa: E402

LABELS = {"bf16": "16-bit (exact)", "echo4": "Echo 4-bit", "nocomp4": "4-bit, no compensation",
          "echo8": "Echo 8-bit"}
POINT = re.compile(r"^layers=(\d+)_seed=(\d+)(?:_steps=\d+)?$")  # depth_study.sh --steps adds _steps=N


class ReportError(Exception):
    pass


class UniqueKeyLoader(yaml.SafeLoader):
    """safe_load that refuses a key given twice in one mapping (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                if key_node.value in seen:
                    raise ReportError(f"config.yaml has the key '{key_node.value}' twice "
                                      f"(line {key_node.start_mark.line + 1})")
                seen.add(key_node.value)
        return super().construct_mapping(node, deep)


def train_steps(point_dir):
    """(train.steps, train.eval_interval or None when not an integer) of the run's config.yaml."""
    path = os.path.join(point_dir, "config.yaml")
    if not os.path.exists(path):
        raise ReportError("no config.yaml")
    if not os.path.isfile(path):  # before open(): a FIFO blocked the report forever
        raise ReportError(f"{path}: not a regular file")
    try:
        with open(path, encoding="utf-8") as f:
            train = (yaml.load(f, Loader=UniqueKeyLoader) or {}).get("train", {})
            steps, interval = train.get("steps"), train.get("eval_interval")
    except UnicodeDecodeError:
        raise ReportError("config.yaml unreadable: not UTF-8 text")
    except (OSError, yaml.YAMLError, AttributeError) as e:
        raise ReportError(f"config.yaml unreadable: {e}")
    except RecursionError:  # PyYAML recurses per level: 5000 nested lists were a traceback
        raise ReportError("config.yaml unreadable: YAML nesting too deep (echo_train's yaml-cpp reads at most "
                          "500 levels)")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ReportError(f"config.yaml has no train.steps (got {steps!r})")
    if not isinstance(interval, int) or isinstance(interval, bool):
        interval = None
    return steps, interval


def no_final_validation(steps, interval, val):
    """Why a run at its last step has no validation there (val: its validation lines)."""
    at = f"the last at step {val[-1]['step']}" if val else "none logged"
    if interval is not None and interval > 0 and steps % interval == 0:
        # echo_train validates at train.steps here: a stop signal during that evaluation abandoned
        # it (the checkpoint of the last step is saved without it); echo_train --resume runs it.
        return (f"final evaluation missing: no validation at step {steps}, {at}; the run stopped during it: "
                "rerun it with --resume")
    # echo_train validates every eval_interval steps only, not at the end.
    return f"no validation at step {steps}, {at}; train.eval_interval must divide train.steps"


def final_val(point_dir):
    """(train.steps, the validation loss at train.steps); ReportError says why a run has none."""
    steps, interval = train_steps(point_dir)
    try:
        m = read_metrics(os.path.join(point_dir, "metrics.jsonl"), missing_ok=True)
    except NonFiniteLoss as e:
        raise ReportError(f"diverged: {e}")
    except MetricsError as e:
        raise ReportError(f"bad metrics.jsonl: {e}")
    last = m["train"][-1]["step"] if m["train"] else 0
    # A validation at last < train.steps is a mid-run evaluation, not the final one.
    if last != steps:
        raise ReportError(f"step {last} of {steps}")
    if not m["val"] or m["val"][-1]["step"] != steps:
        raise ReportError(no_final_validation(steps, interval, m["val"]))
    val = m["val"][-1]["val_loss"]
    # A gap divides by the baseline's loss; a NaN or infinite loss cannot be plotted.
    if not math.isfinite(val) or val <= 0:
        raise ReportError(f"final validation loss is {val}, not a positive finite number")
    return steps, val


def refuse_mixed(lengths):
    """Averaging a 300-step run with a 1200-step one hides the difference: refuse, naming them."""
    if len(lengths) < 2:
        return
    parts = [f"{n} steps ({', '.join(lengths[n][:3])}{', ...' if len(lengths[n]) > 3 else ''})"
             for n in sorted(lengths)]
    raise ReportError("finished runs of different lengths: " + "; ".join(parts)
                      + "; give each length its own --out-root")


def collect(out_root):
    """{setting: {(layers, seed): final val loss}}, and the unfinished or unreadable points."""
    if not os.path.isdir(out_root):
        raise ReportError(f"{out_root}: no such folder")
    results, unfinished, lengths = {}, [], {}
    for setting in sorted(os.listdir(out_root)):
        folder = os.path.join(out_root, setting)
        if not os.path.isdir(folder):
            continue
        named = {}  # (layers, seed) -> the point folder that is it
        for point in sorted(os.listdir(folder)):
            match = POINT.match(point)
            if not match:
                continue
            # layers=02 and layers=2 (or layers=2_seed=1 and ..._steps=N) are one table cell: one would
            # replace the other in silence.
            key = (int(match[1]), int(match[2]))
            if key in named:
                raise ReportError(f"{setting}/{named[key]} and {setting}/{point} are both layers {key[0]}, "
                                  f"seed {key[1]}; remove or rename one of them")
            named[key] = point
            try:
                steps, val = final_val(os.path.join(folder, point))
            except ReportError as e:
                unfinished.append(f"{setting}/{point} ({e})")
                continue
            lengths.setdefault(steps, []).append(f"{setting}/{point}")
            results.setdefault(setting, {})[key] = val
    if not results:
        raise ReportError(f"{out_root}: no finished layers=L_seed=S runs in any setting folder"
                          + (f" (not finished: {', '.join(unfinished)})" if unfinished else ""))
    refuse_mixed(lengths)
    return results, unfinished


def ordered(settings):
    return [s for s in LABELS if s in settings] + sorted(s for s in settings if s not in LABELS)


def cell(values, digits, suffix=""):
    m, sd, n = mean_std(values)
    if m is None:
        return "–"
    text = f"{m:.{digits}f}{suffix}" if sd is None else f"{m:.{digits}f} ± {sd:.{digits}f}{suffix}"
    return f"{text} (n={n})" if n != 3 else text


def gaps(results, baseline, setting, depth):
    """Per-seed gaps in percent of `setting` over `baseline` at `depth`."""
    base, mine = results.get(baseline, {}), results.get(setting, {})
    return [100.0 * (v - base[(d, s)]) / base[(d, s)] for (d, s), v in sorted(mine.items())
            if d == depth and (d, s) in base]


def report(out_root, baseline):
    results, unfinished = collect(out_root)
    if baseline not in results:
        raise ReportError(f"{out_root}: no finished runs of the baseline setting '{baseline}'"
                          + (f" (not finished: {', '.join(unfinished)})" if unfinished else ""))
    settings = ordered(results)
    depths = sorted({d for runs in results.values() for d, _ in runs})
    name = lambda s: LABELS.get(s, s)  # noqa: E731

    lines = ["# Depth study: final validation loss and gap to 16-bit", "",
             f"Written by scripts/depth_report.py from {out_root}. Mean ± sample std over seeds "
             "(n = 3 unless shown).", "", "## Final validation loss", "",
             "| layers | " + " | ".join(name(s) for s in settings) + " |",
             "|---|" + "---|" * len(settings)]
    for d in depths:
        row = [cell([v for (dd, _), v in sorted(results[s].items()) if dd == d], 4) for s in settings]
        lines.append(f"| {d} | " + " | ".join(row) + " |")
    others = [s for s in settings if s != baseline]
    lines += ["", f"## Gap to {name(baseline)}, percent, paired by seed", "",
              "| layers | " + " | ".join(name(s) for s in others) + " |", "|---|" + "---|" * len(others)]
    for d in depths:
        lines.append(f"| {d} | " + " | ".join(cell(gaps(results, baseline, s, d), 2, " %") for s in others) + " |")
    if unfinished:
        lines += ["", "Not finished (left out): " + ", ".join(unfinished)]
    md = os.path.join(out_root, "depth-gap.md")
    # surrogateescape: an OUT_ROOT that is not UTF-8 (os.fsdecode's surrogates) is written back as its
    # bytes; "strict" made it a UnicodeEncodeError.
    with open(md, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write("\n".join(lines) + "\n")

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for s in others:
        pts = [(d, mean_std(gaps(results, baseline, s, d))) for d in depths]
        pts = [(d, m, sd or 0.0) for d, (m, sd, _) in pts if m is not None]
        if pts:
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o",
                        capsize=3, label=name(s))
    ax.axhline(0.0, color="gray", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.set_xlabel("layers (all-reduce sites per layer: 2 forward, 2 backward)")
    ax.set_ylabel(f"final validation loss gap to {name(baseline)} (%)")
    ax.set_title("Quantized tensor-parallel all-reduce vs depth (tp = 4, CPU)", fontsize=10)
    ax.grid(alpha=0.3)
    if others:
        ax.legend(fontsize=8)
    fig.tight_layout()
    png = os.path.join(out_root, "depth-gap.png")
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return md, png, "\n".join(lines)


def main(argv):
    ap = argparse.ArgumentParser(prog="depth_report.py", description="Table and figure of the depth study.")
    ap.add_argument("out_root", help="the study's folder (scripts/depth_study.sh --out-root)")
    ap.add_argument("--baseline", default="bf16", help="the setting folder the gaps are measured against")
    args = ap.parse_args(argv)
    try:
        md, png, text = report(args.out_root, args.baseline)
    except (ReportError, OSError) as e:
        print(f"depth_report: {e}", file=sys.stderr)
        return 1
    print(text)
    print(f"wrote {md}\nwrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
