"""Paths, the MPI launcher and signal forwarding shared by the scripts that start echo's binaries
(sweep.py, comm_eval.py)."""

import os
import shlex
import signal
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class LaunchError(Exception):
    """A launcher command that cannot be split into arguments."""


def default_tool(relpath):
    """A path under the repository, relative to the current directory (short in printed commands)."""
    return os.path.relpath(os.path.join(REPO, relpath))


def launcher(command):
    """The MPI launcher as an argument list: an existing file is one argument (a repository path
    may hold spaces or quotes), anything else is split like a shell would; a lone *.sh script is
    run through bash (scripts/mpirun.sh need not be executable in a fresh clone)."""
    if os.path.isfile(command):
        argv = [command]
    else:
        try:
            argv = shlex.split(command)
        except ValueError as e:
            raise LaunchError(f"--mpirun {command!r}: cannot be split into arguments ({e})")
        if not argv:
            raise LaunchError("--mpirun is empty")
    if len(argv) == 1 and argv[0].endswith(".sh"):
        argv = ["bash", argv[0]]
    return argv


class SignalForwarder:
    """While active, SIGINT and SIGTERM do not kill this script: they are remembered (signum) and
    SIGUSR1 is sent to the running child's process group, so echo_train saves a checkpoint and
    exits; the caller then stops starting children. Children run in their own session, so a
    terminal's Ctrl-C reaches them only through this forwarding (one clean SIGUSR1).
    NOTE: SIGUSR1, not SIGTERM: mpirun forwards SIGUSR1 to the ranks and waits for them, while on
    SIGTERM it aborts the job, killing ranks still saving their checkpoint about a second later
    (a sweep under load lost its checkpoint that way). A second signal sends SIGTERM and a third
    SIGKILL, for a run that cannot stop between steps (a hung collective, a launcher that ignores
    SIGUSR1). SIGHUP (the terminal closed) counts as well: the run is not left unattended."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    ESCALATION = (signal.SIGUSR1, signal.SIGTERM, signal.SIGKILL)

    def __init__(self):
        self.signum = None
        self.count = 0  # signals received
        self.child = None
        self.previous = {}

    def __enter__(self):
        self.previous = {s: signal.signal(s, self.on_signal) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)
        return False

    def on_signal(self, signum, frame):
        self.signum = self.signum or signum
        self.count += 1
        self.forward()

    def forward(self):
        if self.child is not None and self.child.poll() is None:
            sig = self.ESCALATION[min(max(self.count, 1), len(self.ESCALATION)) - 1]
            if sig != signal.SIGUSR1:
                print(f"signal {self.count}: sending {sig.name} to the run", file=sys.stderr, flush=True)
            try:
                os.killpg(self.child.pid, sig)
            except ProcessLookupError:
                pass

    def run(self, cmd, **popen_kwargs):
        """(exit status, stdout, stderr) of cmd, waited for even after a signal."""
        self.child = subprocess.Popen(cmd, start_new_session=True, **popen_kwargs)
        try:
            if self.signum:  # the signal came while the child was being started
                self.forward()
            out, err = self.child.communicate()
            return self.child.returncode, out, err
        finally:
            self.child = None


def exit_status(status):
    """sys.exit(status); a status of 128 + SIGINT, SIGTERM or SIGHUP is re-raised as that signal
    instead, so that a calling shell loop (depth_study.sh runs one sweep after another) stops as
    it does for a child killed by it: bash goes on after a child that merely exits 130."""
    signum = status - 128 if isinstance(status, int) and status > 128 else None
    if signum in SignalForwarder.SIGNALS:
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    sys.exit(status)


def run_main(prog, main, argv):
    """exit_status(main(argv)). A Ctrl-C while no child runs (SIGINT is a KeyboardInterrupt outside
    a SignalForwarder: reading the configs, writing the results) is one line, not a traceback, and
    the script dies of SIGINT as it does after an interrupted run."""
    try:
        status = main(argv)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (SIGINT); no run was in progress", file=sys.stderr)
        status = 128 + signal.SIGINT
    exit_status(status)
