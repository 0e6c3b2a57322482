"""Running the user's program for `cachalot record` and `cachalot capture`, as a careful user
expects of a wrapper:

- SIGINT, SIGTERM and SIGHUP sent to cachalot are forwarded to the program, which gets all the
  time it needs to finish and write what it recorded (nothing is SIGKILLed). A Ctrl-C typed at
  the terminal already reaches the program (same process group), so it is not sent twice: the
  kernel marks such a signal (`si_code == SI_KERNEL`), a `kill` does not;
- the exit status follows the shell's convention: the program's own status, 128+N when it was
  killed by signal N, 128+N when cachalot itself was interrupted by signal N;
- the program never outlives cachalot: cachalot waits for it whatever happens, and, being the
  subreaper of everything it starts, ends the processes the program left behind (the ranks of a
  launcher that died, a worker that was never joined): SIGTERM, a grace period, then SIGKILL;
- with a `timeout`, a program still running after it gets SIGTERM, then SIGKILL after a grace
  period (a deadlocked job ends with a clear message instead of hanging).

In the program, `_recorder.exit_on_sigterm()` turns a SIGTERM into `SystemExit(143)` so that `atexit`
handlers (the snapshot writers) run, which Python's default SIGTERM action skips.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import NamedTuple

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_SI_KERNEL = 0x80  # si_code of a signal the kernel sent (a terminal's Ctrl-C), not a kill()
_PR_SET_CHILD_SUBREAPER = 36
GRACE = 10.0  # seconds a process is given between SIGTERM and SIGKILL


class Finished(NamedTuple):
    status: int  # what cachalot exits with for the program (shell convention)
    interrupted: int | None  # the first signal cachalot received, if any
    killed_by: int | None  # the signal that ended the program, if any
    timed_out: bool = False  # it ran past `timeout` and was ended
    left_behind: int = 0  # processes the program left running, which cachalot ended


def _subreaper(on: bool) -> None:
    """Orphans of the program are re-parented to this process, not to init (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0)


def _children() -> list[int]:
    """The pids whose parent is this process (the program's orphans, once it has ended)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
        if len(fields) > 1 and int(fields[1]) == me:
            found.append(int(entry))
    return found


def _reap_left_behind() -> int:
    """Ends and reaps what the program left: SIGTERM, GRACE seconds, SIGKILL. The count."""
    ended: set[int] = set()
    deadline = None
    while True:
        with contextlib.suppress(ChildProcessError):
            while True:
                pid, _ = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
        left = _children()
        if not left:
            return len(ended)
        now = time.monotonic()
        if deadline is None:
            deadline = now + GRACE
        sig = signal.SIGTERM if now < deadline else signal.SIGKILL
        for pid in left:
            if pid not in ended or sig == signal.SIGKILL:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            ended.add(pid)
        time.sleep(0.1)


def signal_name(sig: int) -> str:
    return signal.Signals(sig).name


def run(
    cmd: Sequence[str],
    env: dict[str, str],
    stdout: int | None = None,
    timeout: float | None = None,
) -> Finished:
    """Runs `cmd` and waits for it, forwarding signals (see the module docs). Raises what
    `subprocess.Popen` raises when `cmd` cannot start (FileNotFoundError, PermissionError)."""
    waited = {*FORWARDED, signal.SIGCHLD}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    interrupted: int | None = None
    timed_out, left = False, 0
    _subreaper(True)
    try:
        p = subprocess.Popen(
            list(cmd),
            env=env,
            stdout=stdout,
            # The program starts with the signal mask cachalot had, not the blocked one.
            preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_SETMASK, old),
        )
        end = time.monotonic() + timeout if timeout else None
        while p.poll() is None:
            info = signal.sigtimedwait(waited, 0.5)
            if end is not None and time.monotonic() > end:
                # past the limit: SIGTERM (the program writes what it captured), then SIGKILL
                sig = signal.SIGKILL if timed_out else signal.SIGTERM
                timed_out = True
                end = time.monotonic() + GRACE
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, sig)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            interrupted = interrupted or info.si_signo
            if info.si_code != _SI_KERNEL:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, info.si_signo)
        left = _reap_left_behind()
    finally:
        _subreaper(False)
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    rc = p.returncode
    killed_by = -rc if rc < 0 else None
    if interrupted is not None:
        status = 128 + interrupted
    elif killed_by is not None:
        status = 128 + killed_by
    else:
        status = rc
    return Finished(status, interrupted, killed_by, timed_out, left)
