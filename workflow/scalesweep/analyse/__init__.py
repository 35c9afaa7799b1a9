"""From the runs to a summary: runs.csv and the summary tables, the statistics (same-block
pairs, verdicts, intervals), the adaptive decision after each block, the scaling fits, the
machine's drift and the job timeline. May import every layer below it (``record`` ...
``run``); never ``report`` or ``campaign``.
"""
