"""Snakemake glue: time a container runtime's own start-up, beside native, in this image."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

from scalesweep.record.metrics import write_metrics  # noqa: E402
from scalesweep.run.startup import measure_startup  # noqa: E402

sm = snakemake  # noqa: F821
record = measure_startup(
    sm.wildcards.runtime,
    str(Path(sm.params.image).resolve()),
    sm.config,
    repeats=int(sm.params.repeats),
    manifest=sm.input.get("manifest"),
)
write_metrics(sm.output[0], record)
