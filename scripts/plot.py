#!/usr/bin/python3
"""Plots echo_train runs from their metrics.jsonl files, as PNG.

    scripts/plot.py RUN [RUN ...] [--out DIR] [--labels A,B,...] [--smooth 50] [--tail 1500]
                    [--tail-smooth 100] [--ymax Y] [--no-telemetry]

RUN is a run directory (run.out_dir, holding metrics.jsonl) or a metrics.jsonl file. Writes to
--out (default: plots/):

  loss.png             training loss of every run, laid out like Figure 3 of the Echo paper
                       (arXiv:2610.14277): left, the whole run as a moving average over --smooth
                       steps (y axis clipped to the part after the first 5 % of the steps; --ymax
                       sets the top), with a gray band over the tail; right, the last --tail
                       steps as a --tail-smooth-step average with a +-1 s.d. band. Validation
                       losses, where logged, are the dots on the left panel. When a run is
                       shorter than twice --tail, the right panel shows its last quarter.
  telemetry-LABEL.png  for each run with echo_site telemetry (comm.telemetry_interval > 0; LABEL
                       with characters other than letters, digits and ._-=+ as -, and -2, -3,
                       ... where two labels come out the same, e.g. 'a b' and 'a-b'): the
                       norms of the error injected at each all-reduce site, ||delta_k||, and of
                       the accumulated error ||S_t|| (Echo paper Eqns. 4-6), over the steps, one
                       line per site colored by site index, forward and backward passes apart.

It also prints, per run, the last step, the tail-100 mean training loss and the last
validation loss.

    scripts/plot.py --depth depth.csv [--out DIR]

draws depth.png from the CSV of echo_depth --csv: max_t ||S_t|| / q against the number of
all-reduce sites N, log-log, per compensator gain and case, with the bound of Theorem 1 /
Eqn. (21) of the Echo paper beside each line (see plot_depth).

    scripts/plot.py --sweep RESULTS.csv [RESULTS.csv ...] --sweep-x KEY [--labels A,B] [--out DIR]

draws KEY's last component .png (e.g. lr.png for optim.lr) from the results.csv of
scripts/sweep.py runs: the final validation loss of the finished points, mean +- one sample std
over the other grid keys (the seeds), against KEY, one line per CSV; a log x axis when KEY's
values span a factor of 4 or more.

Non-finite and huge values are refused, not plotted (exit 1, one line, no figure): a NaN or
infinite loss in a metrics.jsonl (named by file and line: the run diverged; echo_train itself
stops on one) or in a results.csv (named by file and point), and a loss or swept value beyond
+-1e300 (named by file and step, or point), which matplotlib cannot place on an axis. Values up
to 1e300 are plotted. In an echo_depth CSV (named by file and row) every number must be finite,
and sites, max_s_over_q and bound (log axes) positive and at most 1e300. An input file that is
not a regular file (a FIFO) is refused, and so is a --ymax not above the lowest loss of the
full-run panel; --ymax goes with RUN directories only. Telemetry lines whose direction is not
forward or backward are left out of the telemetry figure, with a warning.
"""

import argparse
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from metrics import MetricsError, mean_std, read_metrics, tail_mean  # noqa: E402


class PlotError(Exception):
    pass


# The largest magnitude a plotted value may have. matplotlib computes axis spans, padding and tick
# steps in doubles: values near the float limit (1e308) overflow there (an axis from -1e308 to
# 1e308 is an IndexError in its tick locator). A loss that large is a diverged run anyway.
PLOT_LIMIT = 1e300


def refuse_huge(value, where, hint=" (did the run diverge?)"):
    """PlotError naming where, for a value matplotlib cannot place on an axis."""
    if abs(value) > PLOT_LIMIT:
        raise PlotError(f"{where} is {value:g}, beyond ±{PLOT_LIMIT:g}: too large to plot{hint}")


# ---------------------------------------------------------------- reading ---------------------

def metrics_path(run):
    path = os.path.join(run, "metrics.jsonl") if os.path.isdir(run) else run
    if not os.path.isfile(path):
        raise PlotError(f"{run}: no metrics.jsonl there")
    return path


def read_run(run):
    """{'train': [(step, loss)], 'val': [(step, val_loss)], 'sites': {(direction, site): [...]},
    'tail100': the tail-100 mean training loss}"""
    path = metrics_path(run)
    try:
        # A NaN or infinite loss is refused there (NonFiniteLoss), naming the file and line.
        m = read_metrics(path, cut_ok=True)
    except MetricsError as e:
        raise PlotError(str(e))
    for d in m["train"]:
        refuse_huge(d["loss"], f"{path}: the training loss of step {d['step']}")
    for d in m["val"]:
        refuse_huge(d["val_loss"], f"{path}: the validation loss of step {d['step']}")
    if m["cut_line"]:
        print(f"plot: {path}:{m['cut_line']}: the last line is cut off (a run stopped while writing it); "
              f"plotting the {m['cut_line'] - 1} lines before it", file=sys.stderr)
    return {"path": m["path"], "train": [(d["step"], d["loss"]) for d in m["train"]],
            "val": [(d["step"], d["val_loss"]) for d in m["val"]], "sites": m["sites"],
            "tail100": tail_mean(m["train"])}


def labels_for(runs, given, what="runs"):
    """One label per run (or per sweep CSV): --labels, else the folder names."""
    if given:
        labels = given.split(",")
        if len(labels) != len(runs):
            raise PlotError(f"--labels names {len(labels)} {what}, but {len(runs)} were given")
    else:
        labels = [os.path.basename(os.path.normpath(r if os.path.isdir(r) else os.path.dirname(r) or "."))
                  for r in runs]
        if len(set(labels)) < len(labels):
            labels = [os.path.normpath(r) for r in runs]
    refuse_same(runs, labels, what)
    return labels


def refuse_same(runs, labels, what):
    """One run given twice (as RUN and RUN/metrics.jsonl, through a link, with a trailing slash:
    compared by the real path of its file) or two runs under one label (one legend entry): refuse,
    naming them. Labels that differ only in characters a file name cannot hold ('a b' and 'a-b')
    are fine: telemetry_files gives them files of their own."""
    files, by_label = {}, {}
    for run, label in zip(runs, labels):
        real = os.path.realpath(metrics_path(run) if what == "runs" else run)
        if real in files:
            first = files[real]
            if os.path.normpath(first) == os.path.normpath(run):
                raise PlotError(f"{run} is given twice")
            raise PlotError(f"{what} {first} and {run} are one file ({real}); give it once")
        files[real] = run
        if label in by_label:
            first, other = by_label[label]
            raise PlotError(f"{what} {first} and {run} have the same label ('{other}' and '{label}'); "
                            "give each its own with --labels")
        by_label[label] = (run, label)


def telemetry_files(labels):
    """telemetry-LABEL.png per label, LABEL made file-safe; labels that map to one name ('a b' and
    'a-b') get -2, -3, ... after the first, so no figure overwrites another."""
    names, taken = [], set()
    for label in labels:
        base = f"telemetry-{safe(label)}"
        name, n = base + ".png", 1
        while name in taken:
            n += 1
            name = f"{base}-{n}.png"
        taken.add(name)
        names.append(name)
    return names


# ---------------------------------------------------------------- smoothing -------------------

def points_per(window_steps, steps):
    """How many logged points cover window_steps steps (log_interval may be > 1)."""
    if len(steps) < 2:
        return 1
    spacing = float(np.median(np.diff(steps)))
    return max(1, int(round(window_steps / max(spacing, 1.0))))


def trailing_mean_std(values, window):
    """Mean and s.d. over the last `window` values at each index (fewer at the start). Huge values
    (up to PLOT_LIMIT) are divided by the largest magnitude first: their squares and running sums
    would overflow to inf and nan."""
    v = np.asarray(values, dtype=float)
    scale = float(np.max(np.abs(v))) if len(v) else 1.0
    if scale > 1e150:
        mean, std = trailing_mean_std(v / scale, window)
        return mean * scale, std * scale
    c1 = np.concatenate([[0.0], np.cumsum(v)])
    c2 = np.concatenate([[0.0], np.cumsum(v * v)])
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(0, idx - window)
    n = idx - lo
    mean = (c1[idx] - c1[lo]) / n
    var = np.maximum((c2[idx] - c2[lo]) / n - mean * mean, 0.0)
    return mean, np.sqrt(var)


# ---------------------------------------------------------------- figures ---------------------

def plot_loss(runs, labels, out_path, smooth, tail, tail_smooth, ymax):
    fig, (ax_full, ax_tail) = plt.subplots(1, 2, figsize=(12, 4.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    last = max(r["train"][-1][0] for r in runs if r["train"])
    tail_steps = tail if last >= 2 * tail else min(last, max(2, math.ceil(last / 4)))
    tail_start = last - tail_steps
    lo, hi = math.inf, -math.inf
    for i, (run, label) in enumerate(zip(runs, labels)):
        if not run["train"]:
            continue
        color = colors[i % len(colors)]
        steps = np.array([s for s, _ in run["train"]], dtype=float)
        loss = np.array([v for _, v in run["train"]], dtype=float)
        mean, _ = trailing_mean_std(loss, points_per(smooth, steps))
        ax_full.plot(steps, mean, color=color, lw=1.2, label=label)
        if run["val"]:
            ax_full.plot([s for s, _ in run["val"]], [v for _, v in run["val"]], "o", ms=3.5, color=color,
                         alpha=0.8, label=f"{label} (val)")
        skip = steps >= steps[0] + 0.05 * (steps[-1] - steps[0])
        lo, hi = min(lo, mean[skip].min()), max(hi, mean[skip].max())
        late_val = [v for s, v in run["val"] if s >= steps[0] + 0.05 * (steps[-1] - steps[0])]
        if late_val:
            lo, hi = min(lo, min(late_val)), max(hi, max(late_val))
        # Tail: the average over tail_smooth steps, with +-1 s.d. of the raw losses in the window.
        tmean, tstd = trailing_mean_std(loss, points_per(tail_smooth, steps))
        sel = steps > tail_start
        if not sel.any():
            print(f"plot: {label} ends at step {int(steps[-1])}, before the tail panel's steps "
                  f"{tail_start + 1}-{last}", file=sys.stderr)
        ax_tail.plot(steps[sel], tmean[sel], color=color, lw=1.2, label=label,
                     marker="." if sel.sum() < 30 else None)
        ax_tail.fill_between(steps[sel], (tmean - tstd)[sel], (tmean + tstd)[sel], color=color, alpha=0.2, lw=0)
    if math.isfinite(lo):
        if ymax is not None and ymax <= lo:
            # matplotlib draws a top below the bottom as an inverted axis: no curve, no error.
            plt.close(fig)
            raise PlotError(f"--ymax {ymax:g}: not above the lowest loss of the full-run panel ({num(lo)}); "
                            "give a top above it")
        pad = 0.05 * max(hi - lo, 1e-3)
        ax_full.set_ylim(lo - pad, ymax if ymax is not None else hi + pad)
    ax_full.axvspan(tail_start + 1, last, color="0.85", zorder=0)
    ax_full.set_title(f"training loss ({smooth}-step moving average)")
    ax_tail.set_title(f"last {tail_steps} steps ({tail_smooth}-step average, ±1 s.d.)")
    for ax in (ax_full, ax_tail):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 2.5, 5, 10]))
        ax.set_xlabel("step")
        ax.set_ylabel("loss")
        ax.grid(alpha=0.3)
    ax_full.legend(fontsize=8)
    ax_tail.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path, dpi=120)
    plt.close(fig)


def plot_telemetry(run, label, out_path):
    directions = [d for d in ("forward", "backward") if any(k[0] == d for k in run["sites"])]
    fig, axes = plt.subplots(2, len(directions), figsize=(6 * len(directions), 7), squeeze=False)
    for col, direction in enumerate(directions):
        keys = sorted(k for k in run["sites"] if k[0] == direction)
        n_sites = keys[-1][1] + 1
        cmap = plt.get_cmap("viridis")
        for row, (what, idx) in enumerate((("‖δ_k‖ (error injected at site k)", 1),
                                           ("‖S_t‖ (accumulated error up to site t)", 2))):
            ax = axes[row][col]
            for key in keys:
                pts = run["sites"][key]
                ax.plot([p[0] for p in pts], [p[idx] for p in pts], color=cmap(key[1] / max(n_sites - 1, 1)),
                        lw=1.0, marker="." if len(pts) < 30 else None)
            ax.set_yscale("log")
            ax.set_title(f"{direction}: {what}", fontsize=10)
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 2.5, 5, 10]))
            ax.grid(alpha=0.3, which="both")
            sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, max(n_sites - 1, 1)))
            bar = fig.colorbar(sm, ax=ax, label="site" + (" (visiting order)" if direction == "backward" else ""))
            bar.locator = MaxNLocator(integer=True, steps=[1, 2, 2.5, 5, 10])
            bar.update_ticks()
    fig.suptitle(f"{label}: Echo all-reduce error per site")
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)


def read_csv_rows(path, need, what):
    """The rows of a CSV file as dicts; a file without rows or without every column of `need` is
    refused as not being `what`, naming the columns it needs."""
    import csv
    try:
        # Before open(): a FIFO there (no writer) blocked it forever; a device could be endless.
        if not os.path.isfile(path) and os.path.exists(path):
            raise PlotError(f"{path}: not a regular file")
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = []
            for r in reader:
                if None in r.values():  # fewer fields than the header
                    raise PlotError(f"{path}:{reader.line_num}: {len(r) - list(r.values()).count(None)} "
                                    f"fields, the header has {len(reader.fieldnames)}")
                rows.append(r)
    except OSError as e:
        raise PlotError(f"{path}: {e.strerror}")
    except UnicodeDecodeError:
        raise PlotError(f"{path}: not UTF-8 text")
    except csv.Error as e:
        raise PlotError(f"{path}: not a CSV file ({e})")
    if not rows or not need <= set(rows[0]):
        columns = ", ".join(rows[0]) if rows else "none"
        raise PlotError(f"{path}: not {what} (needs the columns {', '.join(sorted(need))}; has: {columns})")
    return rows


def read_depth_csv(path):
    """The rows of echo_depth --csv: one dict per (case, eta, coefficients, N)."""
    need = {"case", "eta", "beta1", "beta2", "a", "mu_w", "sites", "max_s_over_q", "bound"}
    rows = read_csv_rows(path, need, "an echo_depth CSV")
    out = []
    for r in rows:
        try:
            out.append({"case": r["case"], "eta": float(r["eta"]), "beta1": float(r["beta1"]),
                        "beta2": float(r["beta2"]), "a": float(r["a"]), "mu_w": float(r["mu_w"]),
                        "sites": int(r["sites"]), "ratio": float(r["max_s_over_q"]), "bound": float(r["bound"]),
                        "P": r.get("P", "?"), "bits": r.get("bits", "?")})
        except ValueError as e:
            raise PlotError(f"{path}: bad value in row {r}: {e}")
    # As the other modes: nothing matplotlib would plot as nonsense or not at all (the axes are
    # logarithmic: 0 and negative values vanish with a warning; inf, nan and 1e308 gave a figure
    # with exit 0, or an overflow in its tick math).
    for i, (r, d) in enumerate(zip(rows, out), 1):
        text = lambda name: r[name] if len(r[name]) <= 40 else f"{r[name][:12]}... ({len(r[name])} digits)"  # noqa: E731
        for name, key in (("eta", "eta"), ("beta1", "beta1"), ("beta2", "beta2"), ("a", "a"), ("mu_w", "mu_w"),
                          ("sites", "sites"), ("max_s_over_q", "ratio"), ("bound", "bound")):
            value = d[key]
            if isinstance(value, float) and not math.isfinite(value):
                raise PlotError(f"{path}: row {i}: {name} is {text(name)}, not a finite number")
            if name in ("sites", "max_s_over_q", "bound"):
                if value <= 0:
                    raise PlotError(f"{path}: row {i}: {name} is {text(name)}, not positive (the axes are logarithmic)")
                if value > PLOT_LIMIT:
                    raise PlotError(f"{path}: row {i}: {name} is {text(name)}, beyond {PLOT_LIMIT:g}: too large to plot")
    return out


def plot_depth(records, out_path):
    """The depth figure: max_t ||S_t|| / q against the number of sites N (log-log), one panel per
    case (coherent: the same contribution at every site; independent: fresh ones), one line per
    (eta, beta1, beta2, a), each with its bound in the same color, dashed: Theorem 1's (1 + mu_w)
    at eta = 1, Eqn. (21)'s (1 - eta) N + eta (1 + mu_w) below (N itself at eta = 0)."""
    cases = [c for c in ("coherent", "independent") if any(r["case"] == c for r in records)]
    if not cases:
        raise PlotError("no coherent or independent rows in the echo_depth CSV")
    settings = sorted({(r["eta"], r["beta1"], r["beta2"], r["a"]) for r in records})
    cmap = plt.get_cmap("viridis")
    fig, axes = plt.subplots(1, len(cases), figsize=(6.2 * len(cases), 4.8), squeeze=False)
    for col, case in enumerate(cases):
        ax = axes[0][col]
        for i, key in enumerate(settings):
            pts = sorted((r["sites"], r["ratio"], r["bound"]) for r in records
                         if r["case"] == case and (r["eta"], r["beta1"], r["beta2"], r["a"]) == key)
            if not pts:
                continue
            color = cmap(i / max(len(settings) - 1, 1) * 0.9)
            eta, b1, b2, a = key
            label = f"η={eta:g}" + ("" if len(settings) <= 3 else f", β=({b1:g},{b2:g}), a={a:g}")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=color, lw=1.6, ms=4, label=label)
            ax.plot([p[0] for p in pts], [p[2] for p in pts], "--", color=color, lw=1.0, alpha=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sites N")
        ax.set_ylabel("max_t ‖S_t‖ / q")
        ax.set_title(f"{case} errors", fontsize=11)
        ax.grid(alpha=0.3, which="both")
        ax.plot([], [], "--", color="gray", lw=1.0, label="bound (Thm. 1 / Eqn. 21)")
        ax.legend(fontsize=8, loc="upper left")
    r0 = records[0]
    fig.suptitle(f"Accumulated Echo error vs depth (echo_depth, P = {r0['P']}, {r0['bits']}-bit)")
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)


def read_sweep_csv(path, key):
    """{x: [final validation loss of each finished point]} from a sweep.py results.csv."""
    rows = read_csv_rows(path, {key, "final_val_loss"}, f"a sweep.py results.csv with a '{key}' column")
    out = {}
    for r in rows:
        if r.get("status") != "done" or not r["final_val_loss"]:
            continue
        try:
            x, loss = float(r[key]), float(r["final_val_loss"])
        except ValueError as e:
            raise PlotError(f"{path}: bad value in point {r.get('point')}: {e}")
        for name, value in ((key, x), ("final_val_loss", loss)):
            # float() reads nan and inf; sweep.py never writes them (a diverged point is not done).
            if not math.isfinite(value):
                raise PlotError(f"{path}: point {r.get('point')}: {name} is {r[name]}, not a finite number")
            refuse_huge(value, f"{path}: point {r.get('point')}: {name}", "" if name == key else " (did it diverge?)")
        out.setdefault(x, []).append(loss)
    if not out:
        raise PlotError(f"{path}: no finished points")
    return out


def sweep_points(d):
    """[(x, mean, sample std or None, n)] of {x: [losses]}, sorted by x: what plot_sweep draws and
    main prints."""
    return [(x, *mean_std(d[x])) for x in sorted(d)]


def plot_sweep(series, key, out_path):
    """Final validation loss (mean +- one sample std over seeds) against the swept key, one line
    per (label, {x: [losses]}) in series; n < 3 seeds at a point is written beside it."""
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    xs_all = sorted({x for _, d in series for x in d})
    for label, d in series:
        pts = sweep_points(d)
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] or 0.0 for p in pts], fmt="o-",
                    capsize=4, lw=1.6, ms=5, label=label)
        for x, m, _, n in pts:
            if n < 3:
                ax.annotate(f"n={n}", (x, m), textcoords="offset points", xytext=(4, 4), fontsize=7)
    if xs_all[0] > 0 and xs_all[-1] / xs_all[0] >= 4:
        ax.set_xscale("log")
    ax.set_xticks(xs_all)
    ax.set_xticklabels([f"{x:g}" for x in xs_all])
    ax.minorticks_off()
    ax.set_xlabel(key)
    ax.set_ylabel("final validation loss (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=9)
    fig.tight_layout()
    fig.savefig(out_path, dpi=110)
    plt.close(fig)


def num(x):
    """A loss for the printed summary: 4 decimals, or 4 significant digits for a huge one (1e300
    in fixed point is 300 digits)."""
    return f"{x:.4f}" if abs(x) < 1e6 else f"{x:.4e}"


def safe(text):
    return "".join(c if c.isalnum() or c in "._-=+" else "-" for c in text)


# ---------------------------------------------------------------- main ------------------------

def main(argv):
    ap = argparse.ArgumentParser(
        prog="plot.py", description="Plot echo_train runs (loss curves and Echo telemetry) as PNG.",
        epilog="A NaN or infinite loss (metrics.jsonl: named by file and line; results.csv: by point) is "
               f"refused, not plotted; so is a loss or swept value beyond ±{PLOT_LIMIT:g}, which matplotlib "
               "cannot place on an axis (exit 1, one line).")
    ap.add_argument("runs", nargs="*", help="run directories (holding metrics.jsonl) or metrics.jsonl files")
    ap.add_argument("--out", default="plots", help="output directory (default: plots/)")
    ap.add_argument("--labels", default=None, help="comma-separated legend labels, one per run")
    ap.add_argument("--smooth", type=int, default=50, help="moving average of the full-run panel, in steps (50)")
    ap.add_argument("--tail", type=int, default=1500, help="steps in the zoomed tail panel (1500)")
    ap.add_argument("--tail-smooth", type=int, default=100, help="average of the tail panel, in steps (100)")
    ap.add_argument("--ymax", type=float, default=None, help="top of the full-run panel's y axis")
    ap.add_argument("--no-telemetry", action="store_true", help="skip the telemetry figures")
    ap.add_argument("--depth", default=None, help="echo_depth --csv output: write depth.png from it")
    ap.add_argument("--sweep", nargs="+", default=None, metavar="CSV",
                    help="sweep.py results.csv files: plot the final validation loss against --sweep-x")
    ap.add_argument("--sweep-x", default=None, metavar="KEY", help="the grid key on the x axis of --sweep")
    args = ap.parse_args(argv)
    if args.sweep:
        if args.runs or args.depth:
            ap.error("--sweep goes alone (no run directories, no --depth)")
        if args.ymax is not None:
            ap.error("--ymax sets the top of loss.png (RUN directories); --sweep does not use it")
        if not args.sweep_x:
            ap.error("--sweep needs --sweep-x KEY (the grid key to plot against)")
        try:
            series = list(zip(labels_for(args.sweep, args.labels, "sweep CSV files"),
                              [read_sweep_csv(p, args.sweep_x) for p in args.sweep]))
            os.makedirs(args.out, exist_ok=True)
            path = os.path.join(args.out, safe(args.sweep_x.split(".")[-1]) + ".png")
            plot_sweep(series, args.sweep_x, path)
        except (PlotError, OSError) as e:
            print(f"plot: {e}", file=sys.stderr)
            return 1
        for label, d in series:
            for x, m, sd, n in sweep_points(d):
                print(f"{label}: {args.sweep_x}={x:g}: final val loss {num(m)}"
                      + (f" ± {num(sd)}" if sd is not None else "") + f" (n={n})")
        print(f"wrote {path}")
        return 0
    if not args.runs and not args.depth:
        ap.error("give run directories, --depth CSV or --sweep CSV...")
    if args.ymax is not None and not args.runs:
        ap.error("--ymax sets the top of loss.png (RUN directories); --depth does not use it")
    if args.depth:
        try:
            records = read_depth_csv(args.depth)
            os.makedirs(args.out, exist_ok=True)
            path = os.path.join(args.out, "depth.png")
            plot_depth(records, path)
        except (PlotError, OSError) as e:
            print(f"plot: {e}", file=sys.stderr)
            return 1
        print(f"wrote {path}")
        if not args.runs:
            return 0
    if args.ymax is not None and not math.isfinite(args.ymax):
        ap.error(f"--ymax {args.ymax}: must be a finite number")
    for name in ("smooth", "tail", "tail_smooth"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    try:
        runs = [read_run(r) for r in args.runs]
        labels = labels_for(args.runs, args.labels)
        empty = [lab for lab, r in zip(labels, runs) if not r["train"]]
        if len(empty) == len(runs):
            raise PlotError("no training-loss lines in any of the runs")
        for lab in empty:
            print(f"plot: {lab}: no training-loss lines; left out of loss.png", file=sys.stderr)
        os.makedirs(args.out, exist_ok=True)
        written = [os.path.join(args.out, "loss.png")]
        plot_loss(runs, labels, written[0], args.smooth, args.tail, args.tail_smooth, args.ymax)
        if not args.no_telemetry:
            for run, label, name in zip(runs, labels, telemetry_files(labels)):
                # plot_telemetry draws forward and backward sites; a line of another direction made
                # a figure of no columns (a matplotlib ValueError) or was dropped without a word.
                other = sorted({d for d, _ in run["sites"]} - {"forward", "backward"})
                if other:
                    print(f"plot: {run['path']}: telemetry lines of direction {', '.join(map(repr, other))} "
                          "(echo_train writes forward and backward) left out", file=sys.stderr)
                if any(d in ("forward", "backward") for d, _ in run["sites"]):
                    written.append(os.path.join(args.out, name))
                    plot_telemetry(run, label, written[-1])
                    if name != f"telemetry-{safe(label)}.png":
                        print(f"plot: {label!r}: telemetry-{safe(label)}.png is another label's; writing {name}",
                              file=sys.stderr)
    except (PlotError, OSError) as e:
        print(f"plot: {e}", file=sys.stderr)
        return 1
    for run, label in zip(runs, labels):
        if run["train"]:
            t = run["tail100"]
            v = f"{num(run['val'][-1][1])} (step {run['val'][-1][0]})" if run["val"] else "-"
            print(f"{label}: step {run['train'][-1][0]}, tail-100 loss {num(t)}, last val loss {v}")
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
