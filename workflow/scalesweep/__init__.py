"""scalesweep workflow library: sweep expansion, launch commands, metrics, analysis.

Sub-packages in layers, bottom to top; a module imports only from its own layer or a lower
one, and no import cycle exists (``tests/unit/test_layers.py`` checks both):
``record`` (what a run leaves on disk; standard library only) < ``measure`` (samplers
beside a payload) < ``platform`` (sites, container runtimes, launchers) < ``plan``
(config to points) < ``images`` (image builds) < ``run`` (point to metrics.json) <
``analyse`` (runs to summary) < ``report`` < ``campaign`` (the user's commands);
``cli`` and ``__main__`` sit on top.
"""

__version__ = "0.1.0"
