"""Snakemake glue: K ranks started at once, on the node's disk and on the bounded-rate file
system (scalesweep.run.startscale), for one runtime token."""

import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

from scalesweep.record.metrics import write_metrics  # noqa: E402
from scalesweep.run.startscale import measure_startup_scale  # noqa: E402

sm = snakemake  # noqa: F821
image = str(Path(sm.params.image).resolve()) if sm.params.image else ""
record = measure_startup_scale(sm.wildcards.runtime, image, sm.config, list(sm.params.nodes))
write_metrics(sm.output[0], record)
