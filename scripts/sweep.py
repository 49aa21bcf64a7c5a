#!/usr/bin/python3
"""Runs a grid of echo_train jobs over one base config and tabulates the results.

    scripts/sweep.py BASE.yaml GRID.yaml [--print] [--np N] [--out-root DIR]
                     [--echo-train PATH] [--mpirun CMD] [--yes]

GRID.yaml maps dotted config keys to lists of values, e.g.

    comm.compensator.eta: [0.7, 0.75, 0.9]
    run.seed: [1, 2, 3]

The points are the cartesian product of the lists, in file order (the last key varies
fastest). Each point runs

    MPIRUN -np N ECHO_TRAIN BASE.yaml --set key=value ... --set run.out_dir=OUT_ROOT/NAME --resume

where NAME joins `key=value` for every grid key (the key's last component, or the whole dotted
key where two grid keys share a last component), e.g. `eta=0.7_seed=1`. Values are passed as
written in GRID.yaml. N defaults to the point's parallel.tp (one data-parallel replica).

A point whose metrics.jsonl already reaches train.steps is skipped; any other point is started
with --resume, which continues from its newest checkpoint (or starts it, when there is none).
Where echo_train validates at train.steps (train.eval_interval divides it and data.valid is
set), a point is finished only with the val_loss line of that step: a stop signal during the
final evaluation leaves the last step and its checkpoint without it, and such a point is resumed
("final evaluation missing"; echo_train --resume then runs just that evaluation). A point whose
metrics.jsonl holds a NaN or infinite loss is "diverged": listed with the line, left out of the
means, and not started again (the same config diverges again).
The output of each point goes to OUT_ROOT/logs/NAME.log. --print prints the command lines
instead of running them (one per unfinished point, for a cluster scheduler).

After the runs, it reads each point's metrics.jsonl and writes OUT_ROOT/results.csv (one row per
point: tail-100 mean training loss, i.e. the mean loss over the last 100 steps; the last
validation loss; mean tokens/s over the logged steps after the first) and OUT_ROOT/results.md
(mean +- sample std over run.seed, grouped by the other grid keys).

A grid is refused before anything runs when a key is not a leaf key of configs/default.yaml,
when a value list is empty or not a list, when a value does not have the key's type (number,
integer written with digits only, true/false, text that is not a bare number), when a number has
a leading zero (010: octal to PyYAML, refused by echo_train; 0 and -0 are fine), when a key lists
one value twice (compared by value: 1e-3 and 0.001), when two points' names map to one folder,
when it names run.out_dir (the sweep sets it), or when it has more than 1000 points (--yes runs
them). Spaces and tabs around a value do not make another value (echo_train trims them: 'echo'
and "echo " are one value, refused as listed twice). A name over 250 characters keeps its start
and ends in a hash of the whole. A point folder that already holds a config.yaml differing from
the point's (base + point keys) is refused: it is an earlier sweep's run, not this one's (numbers
compared by value, text keys such as run.init_from as written: '1e3' is not '1000' there). The
base config's train.steps must be an integer. OUT_ROOT/results.csv, results.md or a point's
logs/NAME.log that exists as a folder (or anything but a regular file) is refused, naming it,
before the first point runs; so is a base config, a run's config.yaml or metrics.jsonl that is not
a regular file (a FIFO blocked the sweep forever; the grid may be a pipe, `<(...)`), and YAML
nested too deep. A point whose echo_train exits 0 without writing a metrics.jsonl is failed.
Ranges and cross-key checks are echo_train's: a point it refuses fails with echo_train's message
in its log.

A point whose metrics.jsonl ends in a cut-off line (a run killed while writing it) is read up to
that line. When the lines before it reach train.steps and the newest complete checkpoint is at
train.steps, the point is done (with a warning naming the cut line): echo_train --resume would
only say "nothing to train" and leave the line as it is. Otherwise the point is resumed (logged
"resume"), and echo_train drops the cut line with the lines after its checkpoint.

SIGINT and SIGTERM are forwarded to the running point as SIGUSR1 (mpirun passes it to the ranks;
echo_train saves a checkpoint and exits); the results are written and the sweep exits 128 + the
signal. A Ctrl-C while no point runs (reading the configs, writing the results) ends the sweep
with one line, and it dies of the signal too.

Exit status: 0 when every point finished, 1 when a point is unfinished (each is listed with why)
or the results cannot be written, 2 for a bad command line, config or grid, 130 / 143 when
interrupted. When the reader of stdout goes away (`--print | head -1`) the sweep ends quietly,
exit 1 (Python's convention for a broken pipe), without a traceback.
"""

import argparse
import csv
import hashlib
import itertools
import math
import os
import re
import shlex
import shutil
import subprocess
import sys

import yaml

from checkpoints import newest_checkpoint
from launch import REPO, LaunchError, SignalForwarder, default_tool, launcher, run_main
from metrics import MetricsError, NonFiniteLoss, mean_std, read_metrics, tail_mean

DEFAULTS = os.path.join(REPO, "configs", "default.yaml")
MAX_POINTS = 1000  # more needs --yes: a typo (a list of 10 where 2 was meant) should not start a year of runs
MAX_NAME = 250  # bytes of a point name: the file system allows 255 for NAME.log


class SweepError(Exception):
    """A problem with the command line, the base config or the grid (exit 2)."""


# ---------------------------------------------------------------- configs ---------------------

def flatten(tree, prefix=""):
    """{'comm': {'bits': 4}} -> {'comm.bits': 4} (leaves only)."""
    out = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def load_yaml(path, what, raw=False):
    """The YAML of path; raw: every scalar as the text written there (yaml.BaseLoader). Only a
    regular file: a FIFO blocked open() forever (and is read twice here; echo_train refuses one)."""
    if os.path.exists(path) and not os.path.isfile(path):
        raise SweepError(f"{what} {path}: not a regular file")
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=yaml.BaseLoader) if raw else yaml.safe_load(f)
    except OSError as e:
        raise SweepError(f"cannot read {what} {path}: {e.strerror}")
    except UnicodeDecodeError:
        raise SweepError(f"{what} {path} is not UTF-8 text")
    except yaml.YAMLError as e:
        raise SweepError(f"{what} {path} is not valid YAML: {e}")
    except RecursionError:  # PyYAML recurses per level: 5000 nested lists were a traceback
        raise SweepError(f"{what} {path}: {TOO_DEEP}")
    return data


TOO_DEEP = "YAML nesting too deep (echo_train's yaml-cpp reads at most 500 levels)"


def effective_config(base_path):
    """(the base config's keys over configs/default.yaml's, the base config's own keys as written
    (raw text), configs/default.yaml's keys), flattened."""
    defaults = flatten(load_yaml(DEFAULTS, "defaults"))
    base = load_yaml(base_path, "base config")
    if base is None:
        base = {}
    if not isinstance(base, dict):
        raise SweepError(f"base config {base_path}: expected a mapping of sections")
    config = dict(defaults)
    for key, value in flatten(base).items():
        if key not in config:
            raise SweepError(f"base config {base_path}: unknown key '{key}' (see configs/default.yaml)")
        config[key] = value
    raw = flatten(load_yaml(base_path, "base config", raw=True) or {})
    for key, text in raw.items():
        # PyYAML's safe_load resolves a merge key; the raw reader keeps '<<' as a key.
        if "<<" in key.split("."):
            raise SweepError(f"base config {base_path}: a YAML merge key ('<<') at '{key}'; echo_train does not "
                             "read merge keys: write the keys out")
        if key in defaults and isinstance(text, str) and scalar_kind(defaults[key]) == "number":
            refuse_leading_zero(f"base config {base_path}: '{key}'", text)
    steps = config["train.steps"]
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        where = f"base config {base_path}" if "train.steps" in flatten(base) else f"defaults {DEFAULTS}"
        raise SweepError(f"{where}: 'train.steps' is {steps!r}, not a whole number of steps "
                         "(the sweep compares it with each run's last step)")
    return config, raw, defaults


# ---------------------------------------------------------------- the grid --------------------

def scalar_kind(value):
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "text"


def refuse_leading_zero(key, text):
    """echo_train's refuse_leading_zero (src/core/config/reader.cpp), for integer and real keys:
    [+-]digits with two or more digits, the first 0 (0, -0 and +0 are fine; 0.5 is no such
    literal). PyYAML would read 010 as octal 8, echo_train refuses it."""
    if re.fullmatch(r"[+-]?0[0-9]+", text):
        plain = text.lstrip("+-").lstrip("0") or "0"
        raise SweepError(f"{key}: value '{text}' has a leading zero, which YAML readers disagree on "
                         f"(octal in YAML 1.1, decimal in 1.2); write it without: "
                         f"{'-' if text.startswith('-') else ''}{plain}")


def check_value(where, key, text, node_tag, default):
    """Checks one grid value (as written) against the type of the key's default."""
    want = scalar_kind(default)
    key = f"{where}: '{key}'"
    if want == "bool":
        if text.lower() not in ("true", "false"):
            raise SweepError(f"{key}: value '{text}' must be true or false")
    elif want == "number":
        # Python's float() takes 1_0 and echo_train does not; an integer key takes digits only (4.0 is refused there).
        if "_" in text:
            raise SweepError(f"{key}: value '{text}' is not a number (no '_' in numbers)")
        try:
            number = float(text)
        except ValueError:
            raise SweepError(f"{key}: value '{text}' is not a number")
        if not math.isfinite(number):
            raise SweepError(f"{key}: value '{text}' is not a finite number")
        if isinstance(default, int) and not re.fullmatch(r"[+-]?[0-9]+", text):
            raise SweepError(f"{key}: value '{text}' must be an integer, written without a fraction or exponent")
        refuse_leading_zero(key, text)
    elif node_tag.endswith(":null") or text.strip(BLANKS) == "":
        raise SweepError(f"{key}: empty value")
    elif node_tag.endswith((":int", ":float", ":bool")):
        # A text or choice key (a path, comm.allreduce) never takes a bare number or true/false.
        raise SweepError(f"{key}: value '{text}' is not text (quote it if it really is a name)")


BLANKS = " \t"  # what echo_train trims around a --set value (trim in src/core/config/overrides.cpp)


def value_identity(text, default):
    """What two values of one key (raw YAML text) are compared by, by the key's kind (scalar_kind
    of its default): an integer key's values exactly as integers (run.seed is a uint64, beyond a
    double's 2^53), a real key's by value (1e-3, 1.0e-3 and 0.001 are one value; echo_train writes
    the shortest text that reads back as the same double into config.yaml, so equality is exact;
    NOTE: PyYAML reads 3e-3 as a string, echo_train as 0.003), true/false by truth (yes and on are
    true), text as written (a run name '1e3' is not '1000'). Spaces and tabs around a value do not
    count: echo_train trims them from --set values, so 'echo' and 'echo ' run the same config. The
    grid's duplicate check and the comparison with an existing run use it."""
    text = text.strip(BLANKS)
    kind = scalar_kind(default)
    if kind == "number":
        try:
            return int(text) if isinstance(default, int) else float(text)
        except ValueError:
            try:
                return float(text)
            except ValueError:
                return text
    if kind == "bool":
        return YAML_BOOLS.get(text.lower(), text)
    return text


def load_grid(path, known):
    """[(key, [value text, ...]), ...] in file order; values as written in the file."""
    try:
        with open(path, encoding="utf-8") as f:
            root = yaml.compose(f)
    except OSError as e:
        raise SweepError(f"cannot read grid {path}: {e.strerror}")
    except UnicodeDecodeError:
        raise SweepError(f"grid {path} is not UTF-8 text")
    except yaml.YAMLError as e:
        raise SweepError(f"grid {path} is not valid YAML: {e}")
    except RecursionError:
        raise SweepError(f"grid {path}: {TOO_DEEP}")
    if root is None or not isinstance(root, yaml.MappingNode) or not root.value:
        raise SweepError(f"grid {path}: expected a mapping 'dotted.key: [values...]' with at least one key")
    grid, seen = [], set()
    for key_node, value_node in root.value:
        key = key_node.value
        where = f"grid {path}:{key_node.start_mark.line + 1}"
        if not isinstance(key_node, yaml.ScalarNode):
            raise SweepError(f"{where}: a key must be a dotted config key, not a list or mapping")
        if key in seen:
            raise SweepError(f"{where}: key '{key}' appears twice")
        seen.add(key)
        if key == "run.out_dir":
            raise SweepError(f"{where}: 'run.out_dir' cannot be swept (the sweep sets it to OUT_ROOT/NAME)")
        if key not in known:
            sections = sorted({k.split(".")[0] for k in known})
            prefix = key + "."
            if any(k.startswith(prefix) for k in known):
                raise SweepError(f"{where}: '{key}' is a section, not a key; name a key inside it "
                                 f"(e.g. {next(k for k in known if k.startswith(prefix))})")
            near = [k for k in known if k.split(".")[-1] == key.split(".")[-1]]
            parent = key.rsplit(".", 1)[0] + "." if "." in key else None
            siblings = [k[len(parent):] for k in known if parent and k.startswith(parent)]
            if near:
                hint = f"; did you mean {', '.join(near)}?"
            elif siblings:
                hint = f" (known keys in '{parent[:-1]}': {', '.join(siblings)})"
            else:
                hint = f" (sections: {', '.join(sections)})"
            raise SweepError(f"{where}: unknown key '{key}' (not in configs/default.yaml){hint}")
        if not isinstance(value_node, yaml.SequenceNode):
            raise SweepError(f"{where}: the value of '{key}' must be a list, e.g. {key}: "
                             f"[{value_node.value if isinstance(value_node, yaml.ScalarNode) else '...'}]")
        if not value_node.value:
            raise SweepError(f"{where}: the list of '{key}' is empty")
        values = []
        for item in value_node.value:
            if not isinstance(item, yaml.ScalarNode):
                raise SweepError(f"{where}: '{key}': every value must be a single value, not a list or mapping")
            check_value(where, key, item.value, item.tag, known[key])
            values.append(item.value)
        same = duplicate(values, known[key])
        if same:
            blank = " (echo_train drops the spaces and tabs around a value)" if same[0] != same[1] and \
                same[0].strip(BLANKS) == same[1].strip(BLANKS) else ""
            # repr: the spaces or tab that make the two look different are seen ('\tv').
            raise SweepError(f"{where}: '{key}' lists one value twice: {same[0]!r} and {same[1]!r}{blank}")
        grid.append((key, values))
    return grid


def duplicate(values, default):
    """The first pair of values that are one value (as written), or None."""
    first = {}
    for text in values:
        ident = value_identity(text, default)
        if ident in first:
            return first[ident], text
        first[ident] = text
    return None


def grid_size(grid, allow_big):
    size = math.prod(len(values) for _, values in grid)
    if size > MAX_POINTS and not allow_big:
        raise SweepError(f"the grid has {size} points (more than {MAX_POINTS}); pass --yes to run them all")
    return size


def point_names(grid):
    """Short names of the grid keys: the last component, or the whole key if ambiguous."""
    last = [key.split(".")[-1] for key, _ in grid]
    return [last[i] if last.count(last[i]) == 1 else key for i, (key, _) in enumerate(grid)]


def safe(text):
    return re.sub(r"[^A-Za-z0-9._=+-]", "-", text)


def shorten(name):
    """A name short enough for a folder: a long one keeps its start and gets a hash of the whole
    (deterministic, so a rerun finds the same folder)."""
    if len(name) <= MAX_NAME:
        return name
    return name[:MAX_NAME - 17] + "-" + hashlib.sha256(name.encode()).hexdigest()[:16]


def make_points(grid):
    """The points in order; refused when two of them would share a run folder."""
    short = point_names(grid)
    points, by_name = [], {}
    for combo in itertools.product(*[values for _, values in grid]):
        assignment = list(zip([key for key, _ in grid], combo))
        name = shorten("_".join(safe(f"{s}={v}") for s, v in zip(short, combo)))
        if name in by_name:
            other = by_name[name]["set"]
            differ = "; ".join(f"{k}: '{a}' and '{b}'" for (k, a), (_, b) in zip(other, assignment) if a != b)
            raise SweepError(f"two points map to one run folder '{name}' ({differ}): their names differ only "
                             "in characters a folder name cannot hold; change one of the values")
        point = {"name": name, "set": assignment}
        by_name[name] = point
        points.append(point)
    return points


# ---------------------------------------------------------------- existing runs ---------------

YAML_BOOLS = {"true": True, "yes": True, "on": True, "y": True,
              "false": False, "no": False, "off": False, "n": False}


def same_value(want, got, default):
    """Whether two values of one key, as written, are one value (value_identity)."""
    if not isinstance(want, str) or not isinstance(got, str):
        return want == got  # a list or mapping (not a key a sweep sets)
    return value_identity(want, default) == value_identity(got, default)


def shown(text, default):
    """A raw value for a message: text keys quoted as written, numbers as PyYAML reads them."""
    if not isinstance(text, str) or scalar_kind(default) == "text":
        return repr(text)
    try:
        return repr(yaml.safe_load(text))
    except yaml.YAMLError:
        return repr(text)


def check_existing(out_dir, expected, defaults):
    """Refuses an existing run folder whose config.yaml (echo_train's effective config) differs
    from what this sweep would run there: an earlier sweep's results are not this one's."""
    metrics = os.path.join(out_dir, "metrics.jsonl")
    if os.path.exists(metrics) and not os.path.isfile(metrics):
        # Read before anything runs (which points are finished): a FIFO blocked the sweep forever.
        raise SweepError(f"{metrics}: not a regular file; remove or rename it")
    path = os.path.join(out_dir, "config.yaml")
    if not os.path.exists(path):
        return
    try:
        existing = flatten(load_yaml(path, "run config", raw=True) or {})
    except (SweepError, AttributeError) as e:
        raise SweepError(f"{path}: cannot compare with this sweep ({e}); use another --out-root")
    for key, want in expected.items():
        if key == "run.out_dir":
            continue
        if key not in existing or not same_value(want, existing[key], defaults[key]):
            got = shown(existing[key], defaults[key]) if key in existing else "(missing)"
            raise SweepError(f"{out_dir} holds a run of another config: {key} is {got} there, "
                             f"{shown(want, defaults[key])} here; use another --out-root (or remove the folder)")


def expected_config(base_keys, point):
    """The keys the base config and the point set, as written (raw text)."""
    expected = dict(base_keys)
    for key, text in point["set"]:
        expected[key] = text
    return expected


# ---------------------------------------------------------------- metrics ---------------------

def load_point_metrics(path):
    """(train lines, val lines, error, cut line) of a point's metrics.jsonl; a missing file ->
    empty lists; error: the MetricsError (a NonFiniteLoss for a NaN or infinite loss) or None; a
    cut-off last line (a run killed while writing it) is left out and its number returned (None
    when there is none)."""
    try:
        m = read_metrics(path, missing_ok=True, cut_ok=True)
    except MetricsError as e:
        return [], [], e, None
    return m["train"], m["val"], None, m["cut_line"]


FINAL_EVAL_MISSING = "final evaluation missing"


def point_state(out_dir, steps, final_eval):
    """('done' | 'resume' | 'run' | 'diverged', cut line or None, why or None) of a point. Lines
    before a cut-off last line count: echo_train --resume of a run whose newest checkpoint is at
    train.steps trains nothing and leaves the cut line, so such a run is done; one whose checkpoint
    is earlier drops the cut line and continues (a resume). final_eval: echo_train validates at
    train.steps (evaluates_last_step), so a run is done only with that val_loss line: a stop signal
    during the final evaluation leaves the last step and its checkpoint without it, and a resume
    runs just that evaluation (why = FINAL_EVAL_MISSING). A NaN or infinite loss is 'diverged'
    (why: the line): rerunning it gives the same numbers, so it is not started again."""
    train, val, err, cut = load_point_metrics(os.path.join(out_dir, "metrics.jsonl"))
    if isinstance(err, NonFiniteLoss):
        return "diverged", None, str(err)
    if err:
        return "resume" if os.path.isdir(os.path.join(out_dir, "checkpoints")) else "run", None, None
    reached = bool(train) and train[-1]["step"] >= steps
    newest = newest_checkpoint(out_dir) if reached and cut is not None else None
    if reached and (cut is None or (newest is not None and newest[0] >= steps)):
        if not final_eval or (val and val[-1]["step"] >= steps):
            return "done", cut, None
        return "resume", cut, FINAL_EVAL_MISSING
    return "resume" if train or cut else "run", cut, None


def summarize(train, val):
    last = train[-1]["step"] if train else 0
    tps = [d["tokens_per_s"] for d in train[1:]] or [d["tokens_per_s"] for d in train]
    return {
        "steps_done": last,
        "tail100_loss": tail_mean(train),
        "final_val_loss": val[-1]["val_loss"] if val else None,
        "val_step": val[-1]["step"] if val else None,
        "tokens_per_s": sum(tps) / len(tps) if tps else None,
    }


def fmt(x, digits=4):
    return "" if x is None else f"{x:.{digits}f}"


def write_results(out_root, grid, points, steps_of, final_eval_of):
    keys = [key for key, _ in grid]
    rows = []
    for p in points:
        out_dir = os.path.join(out_root, p["name"])
        train, val, err, _ = load_point_metrics(os.path.join(out_dir, "metrics.jsonl"))
        s = summarize(train, val)
        steps = steps_of(p)
        state, cut, why = point_state(out_dir, steps, final_eval_of(p))
        status = p.get("status") or ("done" if state == "done" else why if why == FINAL_EVAL_MISSING else
                                     "not started" if not train else "incomplete")
        if cut and state != "done" and not p.get("status"):
            status += f" (metrics.jsonl:{cut} cut off)"
        if isinstance(err, NonFiniteLoss):
            status = f"diverged ({err})"
        elif err:
            status = f"bad metrics ({err})"
        elif not train and os.path.isdir(os.path.join(out_dir, "checkpoints")):
            # Not "not started": a rerun resumes the checkpoint but cannot bring back its lost lines.
            status = "no metrics.jsonl although a checkpoint exists"
        rows.append({"point": p["name"], **dict(p["set"]), "status": status,
                     "steps_done": s["steps_done"], "steps": steps,
                     "tail100_loss": fmt(s["tail100_loss"], 6), "final_val_loss": fmt(s["final_val_loss"], 6),
                     "val_step": "" if s["val_step"] is None else s["val_step"],
                     "tokens_per_s": fmt(s["tokens_per_s"], 1), "out_dir": out_dir, "_s": s})
    fields = ["point", *keys, "status", "steps_done", "steps", "tail100_loss", "final_val_loss", "val_step",
              "tokens_per_s", "out_dir"]
    # surrogateescape: a folder name that is not UTF-8 (os.fsdecode's surrogates) is written back
    # as its bytes; "strict" made it a UnicodeEncodeError after the runs.
    with open(os.path.join(out_root, "results.csv"), "w", newline="", encoding="utf-8",
              errors="surrogateescape") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)

    # Markdown: mean +- std over run.seed, grouped by the other grid keys (in grid order).
    group_keys = [k for k in keys if k != "run.seed"]
    groups = {}
    for r in rows:
        groups.setdefault(tuple(r[k] for k in group_keys), []).append(r)
    seeds = "run.seed" in keys
    lines = [f"# Sweep results ({len(rows)} points)", "",
             "tail-100: mean training loss over the last 100 steps; val: the last validation loss; "
             "tokens/s: mean over the logged steps after the first. "
             + ("Mean ± sample std over run.seed; n = finished seeds." if seeds else
                "One run per row (no run.seed in the grid)."), ""]
    head = [*group_keys, "n", "tail-100 loss", "val loss", "tokens/s"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))

    def cell(vals, digits):
        m, sd, n = mean_std(vals)
        if m is None:
            return "–"
        return f"{m:.{digits}f}" if sd is None else f"{m:.{digits}f} ± {sd:.{digits}f}"

    for gkey, members in groups.items():
        done = [r["_s"] for r in members if r["status"] == "done"]
        lines.append("| " + " | ".join([*gkey, f"{len(done)}/{len(members)}",
                                         cell([s["tail100_loss"] for s in done], 4),
                                         cell([s["final_val_loss"] for s in done], 4),
                                         cell([s["tokens_per_s"] for s in done], 0)]) + " |")
    not_done = [r for r in rows if r["status"] != "done"]
    if not_done:
        lines += ["", "Not finished (left out of the means): "
                  + ", ".join(f"{r['point']} ({r['status']})" for r in not_done)]
    with open(os.path.join(out_root, "results.md"), "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write("\n".join(lines) + "\n")
    return rows


# ---------------------------------------------------------------- main ------------------------

def ranks_of(point, config, np_arg):
    """-np of a point: --np, else the point's parallel.tp (a grid may sweep it), else the config's."""
    if np_arg is not None:
        return np_arg
    tp = dict(point["set"]).get("parallel.tp", config["parallel.tp"])
    if isinstance(tp, bool) or not re.fullmatch(r"[0-9]+", str(tp)) or int(tp) < 1:
        raise SweepError(f"parallel.tp {tp!r}: must be a positive integer (or pass --np)")
    return int(tp)


def evaluates_last_step(point, config, steps):
    """Whether echo_train validates a point at its last step: it does at every multiple of
    train.eval_interval (> 0) when data.valid is set (see Trainer::run), so a finished run of such
    a point has a val_loss line at train.steps. A value echo_train refuses counts as no: the point
    fails with echo_train's message anyway."""
    sets = dict(point["set"])
    valid = sets.get("data.valid", config["data.valid"])
    try:
        interval = int(str(sets.get("train.eval_interval", config["train.eval_interval"])).strip(BLANKS))
    except ValueError:
        return False
    return valid is not None and str(valid).strip(BLANKS) != "" and interval > 0 and steps % interval == 0


def check_outputs(out_root, points):
    """Refuses, before any point runs, an output the sweep could not write: results.csv or
    results.md, or a point's log, that is a folder (or anything but a regular file), and a logs
    that is not a folder. Found after the runs, it would cost the results of hours of training;
    found at a point, a failed open() named only the launcher."""
    logs = os.path.join(out_root, "logs")
    if os.path.exists(logs) and not os.path.isdir(logs):
        raise SweepError(f"{logs}: exists and is not a folder (the sweep writes each point's log in it); "
                         "remove or rename it")
    for path, what in ([(os.path.join(out_root, f), "the sweep writes its results there")
                        for f in ("results.csv", "results.md")]
                       + [(os.path.join(logs, p["name"] + ".log"), f"the sweep appends the output of {p['name']} to it")
                          for p in points]):
        if os.path.exists(path) and not os.path.isfile(path):
            kind = "a folder" if os.path.isdir(path) else "not a regular file"
            raise SweepError(f"{path}: is {kind}, but {what}; remove or rename it")


def check_tool(path):
    if os.sep not in path and shutil.which(path):  # a bare name, as mpirun resolves it through PATH
        return
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise SweepError(f"--echo-train {path}: no executable file there (build it, or name it with --echo-train)")


def report_failure(name, rc, log):
    with open(log, encoding="utf-8", errors="replace") as f:
        lines = f.readlines()
    # echo_train's own message ("[rank N] error: ..."), else the end of the log.
    errors = [line for line in lines if re.search(r"\berror\b", line)][:3] or lines[-5:]
    print(f"sweep: {name} failed with exit {rc} (log: {log}):", file=sys.stderr)
    for line in errors:
        print("    " + line.rstrip(), file=sys.stderr)


def main(argv):
    ap = argparse.ArgumentParser(
        prog="sweep.py", description="Run echo_train over the cartesian product of a grid of config values.",
        epilog="Example: scripts/sweep.py configs/quickstart.yaml grid.yaml --out-root runs/sweep "
               "(grid.yaml: 'comm.compensator.eta: [0.7, 0.9]' and 'run.seed: [1, 2, 3]').")
    ap.add_argument("base", help="the base config (YAML)")
    ap.add_argument("grid", help="YAML mapping dotted keys to lists of values")
    ap.add_argument("--print", dest="print_only", action="store_true",
                    help="print one command line per unfinished point instead of running it")
    ap.add_argument("--np", type=int, default=None, help="ranks per point (default: the config's parallel.tp)")
    ap.add_argument("--out-root", default=None,
                    help="each point runs in OUT_ROOT/NAME (default: runs/sweep-<base name>)")
    ap.add_argument("--echo-train", default=default_tool("build/echo_train"), help="the echo_train binary")
    ap.add_argument("--mpirun", default=default_tool("scripts/mpirun.sh"),
                    help="the MPI launcher, a command split like a shell would "
                         "(default: scripts/mpirun.sh, mpirun with the flags echo's scripts use)")
    ap.add_argument("--yes", action="store_true", help=f"run a grid of more than {MAX_POINTS} points")
    args = ap.parse_args(argv)
    # An empty value (an unset shell variable) is not "the default": it would put the runs
    # somewhere the user did not say.
    for flag, value in (("--out-root", args.out_root), ("--echo-train", args.echo_train)):
        if value == "":
            ap.error(f"{flag}: an empty value (an unset shell variable?): give one, or leave the option out")
    out_root = args.out_root or os.path.join(
        "runs", "sweep-" + os.path.splitext(os.path.basename(args.base))[0])

    try:
        config, base_keys, defaults = effective_config(args.base)
        grid = load_grid(args.grid, config)
        if args.np is not None and args.np < 1:
            raise SweepError(f"--np {args.np}: must be at least 1")
        grid_size(grid, args.yes)
        points = make_points(grid)
        for p in points:
            p["np"] = ranks_of(p, config, args.np)
        mpirun = launcher(args.mpirun)
        if os.path.exists(out_root) and not os.path.isdir(out_root):
            raise SweepError(f"--out-root {out_root}: exists and is not a folder")
        for p in points:
            check_existing(os.path.join(out_root, p["name"]), expected_config(base_keys, p), defaults)
        if not args.print_only:
            check_tool(args.echo_train)
            check_outputs(out_root, points)
    except (SweepError, LaunchError) as e:
        print(f"sweep: {e}", file=sys.stderr)
        return 2

    def steps_of(point):
        for key, value in point["set"]:
            if key == "train.steps":
                return int(float(value))
        return int(config["train.steps"])

    def final_eval_of(point):
        return evaluates_last_step(point, config, steps_of(point))

    def command(point, out_dir):
        cmd = [*mpirun, "-np", str(point["np"]), args.echo_train, args.base]
        for key, value in point["set"]:
            cmd += ["--set", f"{key}={value}"]
        return cmd + ["--set", f"run.out_dir={out_dir}", "--resume"]

    todo, finished, diverged = [], 0, []
    for p in points:
        out_dir = os.path.join(out_root, p["name"])
        state, cut, why = point_state(out_dir, steps_of(p), final_eval_of(p))
        if state == "diverged":
            # Not started again: the same config and seed diverge the same way.
            diverged.append(p)
            print(f"sweep: {p['name']} diverged, not started again ({why})", file=sys.stderr)
            continue
        if state == "done":
            finished += 1
            p["status"] = "done"
            if cut:
                print(f"sweep: warning: {os.path.join(out_dir, 'metrics.jsonl')}:{cut}: the last line is cut off "
                      "(the run stopped while writing it); the lines before it and the checkpoint reach "
                      f"train.steps = {steps_of(p)}, so {p['name']} counts as done (echo_train would not rewrite it)",
                      file=sys.stderr)
        else:
            todo.append((p, out_dir, state == "resume", why))

    if args.print_only:
        if finished:
            print(f"# sweep: {finished} of {len(points)} points already finished, not printed",
                  file=sys.stderr)
        for p, out_dir, _, _ in todo:
            print(shlex.join(command(p, out_dir)))
        return 0

    try:
        os.makedirs(os.path.join(out_root, "logs"), exist_ok=True)
    except OSError as e:
        print(f"sweep: cannot make {os.path.join(out_root, 'logs')}: {e.strerror}", file=sys.stderr)
        return 2
    nps = sorted({p["np"] for p in points})
    print(f"sweep: {len(points)} points, {finished} finished, "
          + (f"{len(diverged)} diverged, " if diverged else "")
          + f"{len(todo)} to run (np {','.join(map(str, nps))}, out-root {out_root})", flush=True)
    failed = 0
    with SignalForwarder() as signals:
        for i, (p, out_dir, started, why) in enumerate(todo, 1):
            if signals.signum:  # the signal came between two points
                interrupted = i
                break
            cmd = command(p, out_dir)
            log = os.path.join(out_root, "logs", p["name"] + ".log")
            print(f"sweep: [{i}/{len(todo)}] {'resume' if started else 'run'} {p['name']}"
                  + (f" ({why})" if why else "") + f": {shlex.join(cmd)}", flush=True)
            try:
                f = open(log, "a", encoding="utf-8", errors="surrogateescape")  # as results.csv
            except OSError as e:  # check_outputs ran before the first point; this is a change since
                print(f"sweep: cannot write the log {log}: {e.strerror}", file=sys.stderr)
                return 2
            try:
                with f:
                    f.write(f"$ {shlex.join(cmd)}\n")
                    f.flush()
                    rc, _, _ = signals.run(cmd, stdout=f, stderr=subprocess.STDOUT)
            except OSError as e:
                print(f"sweep: cannot start {cmd[0]}: {e.strerror}", file=sys.stderr)
                return 2
            if signals.signum:
                interrupted = i
                break
            if rc == 0 and not os.path.exists(os.path.join(out_dir, "metrics.jsonl")):
                # An echo_train that exits 0 writes metrics.jsonl; without one the point was listed as
                # "not started", as if it had never run.
                failed += 1
                p["status"] = f"failed (exit 0 without a metrics.jsonl; see {log})"
                print(f"sweep: {p['name']}: echo_train exited 0 but wrote no metrics.jsonl (log: {log})",
                      file=sys.stderr)
                continue
            if rc == 0:
                continue
            failed += 1
            p["status"] = f"failed (exit {rc}; see {log})"
            report_failure(p["name"], rc, log)

    try:
        rows = write_results(out_root, grid, points, steps_of, final_eval_of)
    except OSError as e:  # check_outputs ran before the first point; this is a change since, or a full disk
        print(f"sweep: cannot write {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    print(f"sweep: results in {os.path.join(out_root, 'results.csv')} and {os.path.join(out_root, 'results.md')}")
    if signals.signum:
        print(f"sweep: interrupted at point {interrupted} of {len(todo)} ({todo[interrupted - 1][0]['name']}); "
              "rerun the same command to resume", file=sys.stderr)
        return 128 + signals.signum
    unfinished = [r for r in rows if r["status"] != "done"]
    if unfinished:
        print(f"sweep: {len(unfinished)} of {len(rows)} points unfinished:", file=sys.stderr)
        for r in unfinished:
            print(f"    {r['point']}: {r['status']}", file=sys.stderr)
        return 1
    return 0


def main_to_pipe(argv):
    """main(argv), ending quietly when the reader of stdout has gone (`sweep.py --print | head -1`):
    Python's advice for SIGPIPE (https://docs.python.org/3/library/signal.html#note-on-sigpipe).
    The flush brings a BrokenPipeError of buffered lines here, not to the interpreter's exit."""
    try:
        status = main(argv)
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # stdout to /dev/null: the exit's own flush of what is still buffered would raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    run_main("sweep", main_to_pipe, sys.argv[1:])
