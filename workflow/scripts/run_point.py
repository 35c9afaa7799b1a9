"""Snakemake glue: turn the job's wildcards and config into a launch, then execute it."""

import os
import pwd
import sys
from pathlib import Path

# $USER appears in site paths (/mnt/bb/$USER) and ch-run needs it; batch jobs may lack it
os.environ.setdefault("USER", pwd.getpwuid(os.getuid()).pw_name)

sys.stderr = open(snakemake.log[0], "a")  # noqa: F821 (snakemake is injected)
sys.path.insert(0, str(Path(snakemake.config["_code_root"]) / "workflow"))  # noqa: F821

from scalesweep.payloads import payload_invocation  # noqa: E402
from scalesweep.runpoint import build_launch, execute, image_location  # noqa: E402
from scalesweep.sweep import SweepPoint  # noqa: E402

sm = snakemake  # noqa: F821
point = SweepPoint.from_wildcards(sm.wildcards)
out_dir = Path(sm.output.metrics).parent
inv = payload_invocation(point, sm.params.workload, sm.config, dict(sm.input), out_dir)
launch = build_launch(
    point,
    sm.params.workload,
    sm.config,
    payload_args=inv.args,
    payload=inv.script,
    data_dir=inv.data_dir,
    out_dir=str(out_dir),
    image=str(Path(image_location(sm.config)).resolve()) if point.runtime != "native" else "",
)
rc = execute(
    point,
    launch,
    sm.output.metrics,
    sm.log[0],
    image_manifest=sm.input.get("image_manifest"),
    extra=inv.extra,
    stage_from=inv.stage_from,
)
sys.exit(rc)
