"""The payload's signals: SIGTERM (Slurm's cancel) and SIGHUP end a point through its
``finally`` (the engine stopped, the metrics written); while it finishes, none stops it."""

from __future__ import annotations

import signal
from typing import Any


class Terminated(BaseException):
    """Raised in the main thread by the SIGTERM handler so that ``finally`` runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


def install_signal_handlers() -> None:
    """SIGTERM and SIGHUP raise :class:`Terminated` (SIGINT raises KeyboardInterrupt)."""
    def handler(signum: int, frame: Any) -> None:
        raise Terminated(signum)

    signal.signal(signal.SIGTERM, handler)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, handler)


def ignore_signals() -> Any:
    """Ignore SIGTERM, SIGINT and SIGHUP while the engine stops and the record is written
    (a second signal, a second Ctrl-C too, would leave the server running, orphaned,
    mid-request); returns SIGINT's handler for :func:`restore_signals`."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sigint = signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return sigint


def restore_signals(sigint: Any) -> None:
    """SIGTERM and SIGHUP back to their defaults, SIGINT to ``sigint``."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, sigint)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
