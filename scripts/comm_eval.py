#!/usr/bin/python3
"""The analog of the Echo paper's Table 4 (arXiv:2610.14277): one checkpoint evaluated under every
tensor-parallel communication setting, so the loss each setting costs is read off one table.

    scripts/comm_eval.py CHECKPOINT [--np 4] [--batches N] [--data PREFIX] [--out PREFIX]
                         [--echo-eval PATH] [--mpirun CMD]

CHECKPOINT is what echo_eval takes (a run directory, one of its checkpoints, or a Hugging Face
Qwen3 folder). A run directory is resolved once, before the first row, to its newest complete
checkpoint (said on stdout: "every row evaluates its newest complete checkpoint, step N"), and
every row evaluates that step: a run still training saves newer checkpoints between the rows.
Each row runs

    MPIRUN -np N ECHO_EVAL CHECKPOINT --tp N --set comm.allreduce=... [--set ...] --json ROW.json

with the settings of ROWS below (everything else from the checkpoint's config), and the table
gives the loss, the perplexity, and both against the 16-bit row: the loss difference and the
perplexity change in percent. Writes PREFIX.md (the table and the commands) and PREFIX.json
(echo_eval's JSON per row); PREFIX defaults to CHECKPOINT's run folder + /comm-eval. The exact row
runs first: it is the reference the others are compared with. Both files are written through a
temporary file and a rename, after the last row; before the first row, --out is refused (exit 2)
when PREFIX.md or PREFIX.json lies inside the run's checkpoints/, is one of --data's dataset files,
or exists without being an earlier comm_eval.py output (which it replaces), when PREFIX is a
folder (it is a prefix: DIR/comm-eval) or PREFIX.md / .json is one, and when PREFIX's folder is
not writable or cannot be made (an existing file in its path, an ancestor not writable), and
when PREFIX.md or .json exists and is not a regular file (a FIFO). An --echo-eval that is no
executable file is refused then too (exit 2).

Ctrl-C (SIGINT) or SIGTERM during a row is forwarded to echo_eval as SIGUSR1 and nothing is
written; a Ctrl-C while no row runs ends the script with one line. Either way it dies of the
signal (a calling shell loop stops).

Exit status: 0 when every row ran, 1 when one failed (its echo_eval output is printed), 2 for a bad
command line.
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

from checkpoints import newest_checkpoint
from launch import LaunchError, SignalForwarder, default_tool, launcher, run_main


def echo(bits, compensated, early_site_8bit=False):
    """The overrides of one Echo row (everything not named comes from the checkpoint's config)."""
    return {"comm.allreduce": "echo", "comm.bits": str(bits), "comm.compensator.enabled": str(compensated).lower(),
            "comm.early_site_8bit": str(early_site_8bit).lower()}


# (label, config overrides). Early-site 8-bit: the sites of the first half of the layers at 8 bits,
# the rest at 4 (comm.early_site_8bit, the paper's Sec. 7.2 serving variant).
ROWS = [
    ("16-bit (exact)", {"comm.allreduce": "exact"}),
    ("Echo 8-bit", echo(8, True)),
    ("8-bit, no compensation", echo(8, False)),
    ("Echo 4-bit, early sites 8-bit", echo(4, True, early_site_8bit=True)),
    ("Echo 4-bit", echo(4, True)),
    ("4-bit, no compensation", echo(4, False)),
]


def default_prefix(checkpoint):
    """RUN_DIR/comm-eval for RUN_DIR or RUN_DIR/checkpoints/step_N; CHECKPOINT/comm-eval otherwise."""
    path = os.path.normpath(checkpoint)
    parent = os.path.dirname(path)
    if os.path.basename(parent) == "checkpoints":
        path = os.path.dirname(parent)
    return os.path.join(path, "comm-eval")


def resolve_checkpoint(checkpoint):
    """(what every row evaluates, a line saying so or None). A run directory is resolved once, to
    its newest complete checkpoint: each echo_eval would otherwise pick the newest for itself, and
    a run still training saves newer ones between the rows, so rows would evaluate different
    weights. Anything else (a step directory, Hugging Face weights) goes to echo_eval as given."""
    is_run = os.path.isdir(os.path.join(checkpoint, "checkpoints"))
    if os.path.isfile(os.path.join(checkpoint, "COMPLETE")) or not is_run:
        return checkpoint, None
    newest = newest_checkpoint(checkpoint)
    if newest is None:
        raise ValueError(f"{checkpoint}: a run directory without a complete checkpoint "
                         f"(none under {os.path.join(checkpoint, 'checkpoints')} carries a COMPLETE marker)")
    step, path = newest
    return path, (f"{checkpoint} is a run directory: every row evaluates its newest complete checkpoint, "
                  f"step {step} ({path})")


TITLE = "# Loss of one checkpoint under each tensor-parallel communication setting"


def is_own_output(path):
    """Whether path is a PREFIX.md or PREFIX.json that comm_eval wrote (decided by its content)."""
    try:
        with open(path, encoding="utf-8") as f:
            if path.endswith(".md"):
                return f.readline().rstrip("\n") == TITLE
            rows = json.load(f)
    except (OSError, ValueError, RecursionError):
        return False
    return (isinstance(rows, list) and len(rows) > 0 and
            all(isinstance(r, dict) and "setting" in r and "loss" in r for r in rows))


def refuse_out(prefix, checkpoint, data):
    """Why PREFIX.md / PREFIX.json may not be written, or None: a file there that is not an earlier
    comm_eval output, a path inside the run's checkpoints, or one of --data's dataset files."""
    ckpt = os.path.normpath(checkpoint)
    run = os.path.dirname(os.path.dirname(ckpt)) if os.path.basename(os.path.dirname(ckpt)) == "checkpoints" else ckpt
    checkpoints = os.path.realpath(os.path.join(run, "checkpoints"))
    dataset = {os.path.realpath(data + ext) for ext in (".bin", ".idx", ".meta.json")} if data else set()
    for target in (prefix + ".md", prefix + ".json"):
        real = os.path.realpath(target)
        if real.startswith(checkpoints + os.sep) or real == checkpoints:
            return f"--out {prefix}: {target} is inside the checkpoints of {run}"
        if real in dataset:
            return f"--out {prefix}: {target} is a file of the dataset {data}"
        if os.path.exists(target) and not os.path.isfile(target) and not os.path.isdir(target):
            # Before is_own_output's open(): a FIFO there blocked it forever.
            return f"--out {prefix}: {target}: not a regular file"
        if os.path.lexists(target) and not is_own_output(target):
            return f"--out {prefix}: {target} exists and is not an earlier comm_eval.py output; not overwriting it"
    return None


def refuse_unwritable(prefix):
    """Why PREFIX.md / PREFIX.json cannot be written, or None; asked before the first row, as the
    files are written only after the last (minutes to hours of evaluation). The folder of PREFIX
    is made then if missing: here its nearest existing ancestor must be a writable folder."""
    if prefix.endswith(os.sep) or os.path.isdir(prefix):
        return (f"--out {prefix}: is a folder; --out is a prefix, e.g. "
                f"{os.path.join(prefix, 'comm-eval')} for {os.path.join(prefix, 'comm-eval')}.md and .json")
    for target in (prefix + ".md", prefix + ".json"):
        if os.path.isdir(target):
            return f"--out {prefix}: {target} is a folder"
    folder = os.path.dirname(os.path.abspath(prefix))
    existing = folder
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    later = "" if existing == folder else f", so {folder} cannot be made"
    if not os.path.isdir(existing):
        return f"--out {prefix}: {existing} is not a folder{later}"
    if existing == folder:
        # A real file, as write_atomic makes it: os.access says yes to root on a read-only file system.
        try:
            fd, probe = tempfile.mkstemp(dir=folder, prefix=".comm_eval-")
            os.close(fd)
            os.unlink(probe)
        except OSError as e:
            return f"--out {prefix}: cannot write in {folder}: {e.strerror}"
    elif not os.access(existing, os.W_OK | os.X_OK):
        return f"--out {prefix}: {existing} is not writable{later}"
    return None


def write_atomic(path, text):
    """path written through a temporary file in its folder and a rename: never half written."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".comm_eval-")
    try:
        # surrogateescape: a checkpoint path that is not UTF-8 is written back as its bytes ("strict"
        # lost the table to a UnicodeEncodeError after the last row).
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it 0600; give it what open() would
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def table(checkpoint, np_, rows):
    """The Markdown table of (label, command, result) rows; rows[0] is the 16-bit reference."""
    ref = rows[0][2]
    lines = [TITLE,
             "",
             f"Checkpoint `{checkpoint}` (step {ref['step']}), tp = {np_}, {ref['tokens']} tokens of "
             f"`{ref['data']}` ({ref['batches']} batches of {ref['micro_batch'] * ref['num_micro']} x "
             f"{ref['seq_len']}). Written by scripts/comm_eval.py.",
             "",
             "| setting | loss | perplexity | Δ loss vs 16-bit | Δ perplexity |",
             "|---|---|---|---|---|"]
    for label, _, r in rows:
        d_loss = r["loss"] - ref["loss"]
        d_ppl = 100.0 * (r["ppl"] - ref["ppl"]) / ref["ppl"]
        lines.append(f"| {label} | {r['loss']:.6f} | {r['ppl']:.4f} | {d_loss:+.6f} | {d_ppl:+.3f} % |")
    lines += ["", "Commands:", ""] + [f"    {shlex.join(cmd)}" for _, cmd, _ in rows]
    return "\n".join(lines) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(prog="comm_eval.py",
                                 description="Evaluate one checkpoint under every TP communication setting.")
    ap.add_argument("checkpoint", help="run directory, run_dir/checkpoints/step_N, or a Hugging Face Qwen3 folder")
    ap.add_argument("--np", type=int, default=4, help="ranks = tensor-parallel size (default 4, the paper's P)")
    ap.add_argument("--batches", type=int, default=None, help="global batches (default: the config's eval_batches)")
    ap.add_argument("--data", default=None, help="dataset prefix (default: the config's data.valid)")
    ap.add_argument("--out", default=None, help="output prefix: PREFIX.md and PREFIX.json (default: RUN_DIR/comm-eval)")
    ap.add_argument("--echo-eval", default=default_tool("build/echo_eval"), help="the echo_eval binary")
    ap.add_argument("--mpirun", default=default_tool("scripts/mpirun.sh"),
                    help="the MPI launcher, split like a shell would (default: scripts/mpirun.sh)")
    args = ap.parse_args(argv)
    # An empty value (an unset shell variable) is not "the default": the table would land in the run.
    for flag, value in (("--out", args.out), ("--data", args.data), ("--echo-eval", args.echo_eval)):
        if value == "":
            ap.error(f"{flag}: an empty value (an unset shell variable?): give one, or leave the option out")
    if args.np < 2:
        ap.error(f"--np {args.np}: a tensor-parallel all-reduce needs at least 2 ranks")
    if args.batches is not None and args.batches < 1:
        ap.error(f"--batches {args.batches}: must be at least 1")
    if not os.path.exists(args.checkpoint):
        print(f"comm_eval: {args.checkpoint}: no such checkpoint or run directory", file=sys.stderr)
        return 2
    prefix = args.out or default_prefix(args.checkpoint)
    why = refuse_unwritable(prefix) or refuse_out(prefix, args.checkpoint, args.data)
    if why:
        print(f"comm_eval: {why}", file=sys.stderr)
        return 2
    try:
        mpirun = launcher(args.mpirun)
    except LaunchError as e:
        print(f"comm_eval: {e}", file=sys.stderr)
        return 2
    # As sweep.py's --echo-train: a missing binary failed the first row with mpirun's launch text.
    if not (os.sep not in args.echo_eval and shutil.which(args.echo_eval)) and \
            not (os.path.isfile(args.echo_eval) and os.access(args.echo_eval, os.X_OK)):
        print(f"comm_eval: --echo-eval {args.echo_eval}: no executable file there (build it, or name it with "
              "--echo-eval)", file=sys.stderr)
        return 2
    try:
        checkpoint, said = resolve_checkpoint(args.checkpoint)
    except ValueError as e:
        print(f"comm_eval: {e}", file=sys.stderr)
        return 2
    if said:
        print(f"comm_eval: {said}", flush=True)

    done = []
    with tempfile.TemporaryDirectory() as tmp, SignalForwarder() as signals:
        for i, (label, sets) in enumerate(ROWS):
            out_json = os.path.join(tmp, f"row{i}.json")
            cmd = [*mpirun, "-np", str(args.np), args.echo_eval, checkpoint, "--tp", str(args.np)]
            for key, value in sets.items():
                cmd += ["--set", f"{key}={value}"]
            if args.batches is not None:
                cmd += ["--batches", str(args.batches)]
            if args.data:
                cmd += ["--data", args.data]
            print(f"comm_eval: [{i + 1}/{len(ROWS)}] {label}: {shlex.join(cmd)}", flush=True)
            try:
                rc, out, err = signals.run(cmd + ["--json", out_json], stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True)
            except OSError as e:
                print(f"comm_eval: cannot start {cmd[0]}: {e.strerror}", file=sys.stderr)
                return 2
            if signals.signum:
                # echo_eval got SIGUSR1 and stops; nothing is written (the table needs every row).
                print(f"comm_eval: interrupted at row {i + 1} ({label}); nothing written", file=sys.stderr)
                return 128 + signals.signum
            if rc != 0 or not os.path.exists(out_json):
                print(f"comm_eval: {label}: echo_eval exited {rc}:", file=sys.stderr)
                print((out + err)[-3000:], file=sys.stderr)
                return 1
            with open(out_json, encoding="utf-8") as f:
                result = json.load(f)
            result["setting"] = label
            done.append((label, cmd, result))
            print(f"comm_eval: {label}: loss {result['loss']:.6f} ppl {result['ppl']:.4f}", flush=True)

    text = table(checkpoint, args.np, done)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
        write_atomic(prefix + ".md", text)
        write_atomic(prefix + ".json", json.dumps([r for _, _, r in done], indent=1) + "\n")
    except OSError as e:
        print(f"comm_eval: cannot write {prefix}.md / {prefix}.json: {e.strerror}", file=sys.stderr)
        return 1
    print(text)
    print(f"comm_eval: wrote {prefix}.md and {prefix}.json")
    return 0


if __name__ == "__main__":
    run_main("comm_eval", main, sys.argv[1:])
