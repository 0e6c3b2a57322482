"""Running the user's program for `cachalot record` and `cachalot capture`, as a careful user
expects of a wrapper:

- SIGINT, SIGTERM and SIGHUP sent to cachalot are forwarded to the program, which gets all the
  time it needs to finish and write what it recorded (nothing is SIGKILLed). A Ctrl-C typed at
  the terminal already reaches the program (same process group), so it is not sent twice: the
  kernel marks such a signal (`si_code == SI_KERNEL`), a `kill` does not;
- the exit status follows the shell's convention: the program's own status, 128+N when it was
  killed by signal N, 128+N when cachalot itself was interrupted by signal N;
- the program never outlives cachalot: cachalot waits for it whatever happens.

In the program, `_recorder.exit_on_sigterm()` turns a SIGTERM into `SystemExit(143)` so that `atexit`
handlers (the snapshot writers) run, which Python's default SIGTERM action skips.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import NamedTuple

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_SI_KERNEL = 0x80  # si_code of a signal the kernel sent (a terminal's Ctrl-C), not a kill()


class Finished(NamedTuple):
    status: int  # what cachalot exits with for the program (shell convention)
    interrupted: int | None  # the first signal cachalot received, if any
    killed_by: int | None  # the signal that ended the program, if any


def signal_name(sig: int) -> str:
    return signal.Signals(sig).name


def run(cmd: Sequence[str], env: dict[str, str], stdout: int | None = None) -> Finished:
    """Runs `cmd` and waits for it, forwarding signals (see the module docs). Raises what
    `subprocess.Popen` raises when `cmd` cannot start (FileNotFoundError, PermissionError)."""
    waited = {*FORWARDED, signal.SIGCHLD}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, waited)
    interrupted: int | None = None
    try:
        p = subprocess.Popen(
            list(cmd),
            env=env,
            stdout=stdout,
            # The program starts with the signal mask cachalot had, not the blocked one.
            preexec_fn=lambda: signal.pthread_sigmask(signal.SIG_SETMASK, old),
        )
        while p.poll() is None:
            info = signal.sigtimedwait(waited, 0.5)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            interrupted = interrupted or info.si_signo
            if info.si_code != _SI_KERNEL:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, info.si_signo)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    rc = p.returncode
    killed_by = -rc if rc < 0 else None
    if interrupted is not None:
        status = 128 + interrupted
    elif killed_by is not None:
        status = 128 + killed_by
    else:
        status = rc
    return Finished(status, interrupted, killed_by)
