"""The payload dies with its harness: every command the harness starts is wrapped
(``dies_with_harness``) so that it gets one SIGTERM when the harness dies, even SIGKILLed
(the comment below says why and how; tests/integration/test_reaper.py pins it)."""

from __future__ import annotations

import os
import signal
import sys


# --- The payload dies with its harness ----------------------------------------------------
# The payload runs in a session of its own (the harness signals its whole process group
# on scancel or Ctrl-C), so a SIGKILL of the workflow's process group (kill -9 -PGID, an
# OOM kill) used to leave it running, orphaned, beside the next measurement: the harness
# dies at once and its cleanup never runs. So every command the harness starts gets
# SIGTERM when the harness dies (prctl PR_SET_PDEATHSIG, through this wrapper: a
# preexec_fn is unsafe, the interference monitor's thread runs while the payload
# starts). SIGTERM, not SIGKILL, lets each launcher stop cleanly what it started:
#   local     the payload itself (train_cnn.py dies; infer_llm.py stops its server first)
#   mpirun    Open MPI terminates every rank (each in a process group of its own) and exits
#   torchrun  terminates its workers (each in a session of its own) and exits
#   ch-run    execs the payload, which gets it (ch-run is not set-uid)
#   srun      signals the step's tasks; and Slurm kills every step when the job ends
# (apptainer: its starter may be set-uid, which clears the setting; not tested here.)
# Exactly one SIGTERM: the kernel sends the parent-death signal each time a process's
# parent *thread* changes, and a dying harness has several threads (the interference
# monitor's) and, as a subreaper, adopts orphans into them while it dies: a child is
# handed from thread to thread, one signal each, and a second SIGTERM makes mpirun quit
# at once without stopping its ranks (Open MPI's "forcibly terminate"), leaving them
# running. So this wrapper stays, single-threaded, as the command's parent: told of the
# harness's death by a real-time signal (as often as the kernel likes), it sends the
# command ``sig`` once and waits for it; were the wrapper itself killed, the command gets
# ``sig`` from the kernel (the wrapper has one thread). It ignores SIGINT, SIGTERM and
# SIGHUP (the harness's signals to the payload's process group reach the command
# directly) and ends as the command ended (its exit code, or the same signal). It runs no
# script (``python -c``), so the memory timeline never takes it for a rank. A harness
# that died before the wrapper's prctl, or a wrapper before the command's, is caught by
# the parent check. (tests/integration/test_reaper.py SIGKILLs a harness under mpirun and torchrun.)
# What a payload leaves running while the harness lives on is the harness's to stop: it
# is their subreaper (scalesweep.run.reaper).
_GUARD = """\
import ctypes, os, signal, sys
sig, parent, argv = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
GONE = signal.SIGRTMIN + 1  # the harness died (sent by the kernel only)
STOPS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
child, told = 0, False


def harness_gone(_signum, _frame):
    global told
    if not told and child:
        told = True
        os.kill(child, sig)


def dies_with(parent, signum):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signum)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    return os.getppid() == parent


signal.pthread_sigmask(signal.SIG_BLOCK, STOPS | {GONE})  # until the command has started
signal.signal(GONE, harness_gone)
if not dies_with(parent, GONE):
    sys.stderr.write("scalesweep: the harness died before its command started\\n")
    sys.stderr.flush()
    os._exit(128 + sig)
me = os.getpid()
child = os.fork()
if child == 0:
    signal.signal(GONE, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS | {GONE})
    if not dies_with(me, sig):
        os._exit(128 + sig)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"scalesweep: cannot run {argv[0]}: {exc}\\n")
        sys.stderr.flush()
        os._exit(127)
for s in STOPS:
    signal.signal(s, signal.SIG_IGN)
signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS | {GONE})  # a pending GONE: sig now
status = os.waitpid(child, 0)[1]
if os.WIFSIGNALED(status):  # end the same way
    n = os.WTERMSIG(status)
    try:
        import resource
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # its core, not the wrapper's
        signal.signal(n, signal.SIG_DFL)
    except (ImportError, OSError, ValueError):
        pass
    os.kill(me, n)
    os._exit(128 + n)
os._exit(os.waitstatus_to_exitcode(status))
"""



def dies_with_harness(argv: list[str], sig: int = signal.SIGTERM) -> list[str]:
    """``argv`` wrapped so that its process gets ``sig``, once, when this process dies
    (the wrapper stays its parent, and ends as it ends: see the comment above)."""
    python = sys.executable or "python3"
    return [python, "-I", "-S", "-c", _GUARD, str(int(sig)), str(os.getpid()), *argv]
