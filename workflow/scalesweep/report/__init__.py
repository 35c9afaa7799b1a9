"""The report: its figures, tables and pages, from the summary that ``scalesweep.analyse``
makes. May import every layer below it; never ``campaign``.
"""
