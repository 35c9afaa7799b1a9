"""From a config to the points of a campaign: the config's one validation pass, the sweep
(the points, their paths, block order), adaptive repeats (the walk of the decisions on
disk), what each payload is given, and which image each workload and runtime runs. May
import ``record``, ``measure`` and ``platform``; nothing above it.
"""
