"""The error of a command given bad input: ``scalesweep`` (``scalesweep.cli``) prints it
as one clear line and exits with code 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user: printed as one clear line, exit code 2."""
