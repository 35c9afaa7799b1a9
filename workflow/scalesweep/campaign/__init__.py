"""The user's commands over a campaign (``scalesweep status``, ``rerun``, ``archive``/``merge``,
``compare``, ``plan``, ``overhead``/``scaling``/``fit``, ``overlaps``) and what they
share (the usage error, the user's Snakemake arguments). The top layer: may import every
layer below it; only ``scalesweep.cli`` imports it.
"""
