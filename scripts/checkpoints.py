"""A run directory's checkpoints as echo_train and echo_eval see them, shared by sweep.py (which
point is finished) and comm_eval.py (which checkpoint every row evaluates).

The rules are latest_checkpoint's in src/train/checkpoint: only echo's own names count
(checkpoints/step_ and 8 or more digits, without an extra leading zero: step_00000004, never
step_4, step_000000004 or step_best), and only a folder holding the COMPLETE marker a finished
save writes last. Anything else in checkpoints/ (a user's copy, an interrupted save) is ignored by
--resume, so it is ignored here too.
"""

import os
import re

ECHO_NAME = re.compile(r"step_([0-9]{8,18})")


def echo_step(name):
    """The step of a folder named by echo's rule (step_%08d), or None for any other name."""
    m = ECHO_NAME.fullmatch(name)
    if m is None or name != f"step_{int(m.group(1)):08d}":
        return None
    return int(m.group(1))


def newest_checkpoint(run_dir):
    """(step, RUN_DIR/checkpoints/step_N) of the newest complete checkpoint of a run, or None: the
    one echo_train --resume continues from and echo_eval evaluates for a run directory."""
    root = os.path.join(run_dir, "checkpoints")
    try:
        names = os.listdir(root)
    except OSError:
        return None
    found = []
    for name in names:
        step = echo_step(name)
        path = os.path.join(root, name)
        if step is not None and os.path.isfile(os.path.join(path, "COMPLETE")):
            found.append((step, path))
    return max(found, default=None)
