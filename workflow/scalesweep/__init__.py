"""scalesweep workflow library: sweep expansion, launch commands, metrics, analysis."""

__version__ = "0.1.0"
