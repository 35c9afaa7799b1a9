"""From a point to its metrics.json: the point's launch, the harness that runs and times the
payload, the reaper of what it left running, the container start-up measurement, and the
Slurm resources a point's job is submitted with. May import every layer below it
(``record`` ... ``images``); nothing above it.
"""
