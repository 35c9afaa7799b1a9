"""The error of a command given bad input: ``scalesweep`` (``scalesweep.cli``) prints it
as one clear line and exits with code 2."""

from __future__ import annotations

import argparse


class UsageError(Exception):
    """Bad input from the user: printed as one clear line, exit code 2."""


def positive_number(text: str) -> float:
    """An argparse ``type``: a number above 0 (an hour count, a percentage, minutes)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text!r}")
    return value
