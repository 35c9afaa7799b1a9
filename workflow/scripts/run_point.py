"""The harness of one sweep point (rule run_point): build the launch from the point and
the config, execute it, write metrics.json.

    python workflow/scripts/run_point.py --config CONFIG.json --metrics \
        results/runs/<workload>/<arm>/n<N>-g<G>-r<R>-t<T>/rep<r>/<runtime>/metrics.json [--log RUN.log]

CONFIG.json is the workflow's effective config (written by common.smk: RUN_CONFIG); the
point comes from the metrics path, the inputs from scalesweep.plan.payloads.point_inputs (the
same function that gives the rule its dependencies).
"""

import argparse
import json
import os
import sys
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--config", required=True, help="the workflow's effective config (JSON)")
ap.add_argument("--metrics", required=True, help="results/runs/<point>/metrics.json")
ap.add_argument("--log", help="the harness's log (default: run.log beside metrics.json)")
args = ap.parse_args()
try:
    config = json.loads(Path(args.config).read_text())
    sys.path.insert(0, str(Path(config["_code_root"]) / "workflow"))
except (OSError, ValueError, KeyError, TypeError) as exc:  # written by the workflow (common.smk)
    print(f"scalesweep: cannot read the workflow's config {args.config} ({exc}); run the point "
          "through snakemake, which writes it; the point was not run", file=sys.stderr)
    sys.exit(78)  # EX_CONFIG

from scalesweep.record.pointdir import RUN_LOG, fresh_log  # noqa: E402

args.log = args.log or str(Path(args.metrics).parent / RUN_LOG)
try:  # a read-only results directory stops here, before anything runs
    # this attempt's own file from the first line on: outside Snakemake (which deletes it)
    # run.log may still be the previous attempt's run.<n>.log (a hard link)
    sys.stderr = open(fresh_log(args.log), "a")
except OSError as exc:
    print(f"scalesweep: cannot write {exc.filename or args.log}: {exc.strerror or exc} (a "
          "read-only results directory?); the point was not run", file=sys.stderr)
    sys.exit(74)  # EX_IOERR

from scalesweep.plan.identity import identity_record, source_change  # noqa: E402
from scalesweep.plan.payloads import image_location, image_manifest_of, payload_invocation, point_inputs  # noqa: E402
from scalesweep.plan.sweep import POINT_DEPTH, SweepPoint, is_native, run_order  # noqa: E402
from scalesweep.platform.site import site_of  # noqa: E402
from scalesweep.record.failures import end_started, start_attempt  # noqa: E402
from scalesweep.record.metrics import now_iso  # noqa: E402
from scalesweep.record.hostenv import with_user  # noqa: E402
from scalesweep.record.pointdir import FAILURE_JSON, PointDirError  # noqa: E402
from scalesweep.run.harness import execute  # noqa: E402
from scalesweep.run.payload_process import series_walls, time_limit_s  # noqa: E402
from scalesweep.run.pointlaunch import build_launch  # noqa: E402

# $USER appears in site paths (/mnt/bb/$USER: the payload's arguments) and ch-run needs it
with_user(os.environ)

metrics = Path(args.metrics)
point = SweepPoint.from_path("/".join(metrics.parent.parts[-POINT_DEPTH:]))  # <workload>/.../<runtime>
site = site_of(config)
if os.environ.get("SLURM_JOB_ID") and site["scheduler"] != "slurm":
    # The point was submitted to Slurm (a bare --executor slurm, or an allocation) without
    # its geometry: run_point declares nodes, tasks and CPUs only for a Slurm site. Measuring
    # in whatever allocation this is would publish a number of another layout.
    message = (f"scalesweep: point {point.path} runs in Slurm job {os.environ['SLURM_JOB_ID']}, "
               f"but site {site['name']!r} declares no scheduler (scheduler: {site['scheduler']}), "
               "so the job was not given the point's geometry; name a Slurm site (site: "
               "local-slurm, frontier, ... or your own sites/<name>.yaml), e.g. with "
               "--profile profiles/local-slurm or profiles/frontier. Nothing was measured.")
    print(message, file=sys.stderr)
    print(message, file=sys.__stderr__)
    sys.exit(78)  # EX_CONFIG
workload = config["workloads"][point.workload]
inputs = point_inputs(point.workload, point.runtime, config)
out_dir = metrics.parent
inv = payload_invocation(point, workload, config, inputs, out_dir)
# a dataset staged from another source than the config names (`restage` given without
# --forcerun, which stages it anew) is not measured on (scalesweep.plan.identity)
changed = (workload.get("dataset") in (config.get("datasets") or {})
           and source_change(workload["dataset"], config["datasets"][workload["dataset"]]))
if changed:
    reason = (f"not run: {changed}. (`restage` names it, but it was not staged anew: add "
              "the --forcerun.) Nothing was measured")
    message = f"scalesweep: point {point.path} was {reason}."
    print(message, file=sys.stderr)
    print(message, file=sys.__stderr__)
    try:  # an attempt of its own, failed with the reason: status and the closing message
        start_attempt(out_dir, {"point": point.as_dict(), "start": now_iso()}, args.log)
        end_started(out_dir, reason, 65)
    except OSError as exc:
        print(f"scalesweep: the attempt could not be recorded: {exc}", file=sys.__stderr__)
    sys.exit(65)  # EX_DATAERR
launch = build_launch(
    point,
    workload,
    config,
    payload_args=inv.args,
    payload=inv.script,
    data_dir=inv.data_dir,
    out_dir=str(out_dir),
    image=str(Path(image_location(config, point.workload, point.runtime)).resolve()) if not is_native(point.runtime) else "",
)
try:
    rc = execute(
        point,
        launch,
        str(metrics),
        args.log,
        image_manifest=image_manifest_of(config, point.workload, point.runtime),
        # what the run is measured under: its measured config's digest, the campaign,
        # the staged dataset's source (metrics.json: identity; scalesweep.plan.identity)
        extra={**(inv.extra or {}),
               "identity": identity_record(config, point.workload, point.runtime)},
        stage_from=inv.stage_from,
        dataset=inv.dataset,
        measurement=config["measurement"],
        site=site,
        order=run_order(point, config),
        # outside Slurm, the limit its Slurm job would have, or 10x its series' longest
        # finished run: a hung rank ends the point
        time_limit_s=time_limit_s(workload, site, series_walls(out_dir)),
    )
except PointDirError as exc:  # read-only or full: on the console, and in the log if it can
    message = f"scalesweep: point {point.path}: {exc}"
    log, sys.stderr = sys.stderr, sys.__stderr__
    try:
        print(message, file=log)
        log.close()
    except OSError:
        pass
    print(message, file=sys.stderr)
    sys.exit(74)
if rc != 0:  # one line for the console (the details are in the log and failure.json)
    print(f"scalesweep: point {point.path} failed (exit {rc}); see {out_dir}/{FAILURE_JSON} "
          f"and {args.log}", file=sys.__stderr__)
sys.exit(rc)
