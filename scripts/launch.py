"""Paths and the MPI launcher shared by the scripts that start echo's binaries (sweep.py,
comm_eval.py)."""

import os
import shlex

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def default_tool(relpath):
    """A path under the repository, relative to the current directory (short in printed commands)."""
    return os.path.relpath(os.path.join(REPO, relpath))


def launcher(command):
    """The MPI launcher as an argument list: `command` split like a shell would, a lone *.sh
    script run through bash (scripts/mpirun.sh need not be executable in a fresh clone)."""
    argv = shlex.split(command)
    if command.endswith(".sh") and len(argv) == 1:
        argv = ["bash", command]
    return argv
