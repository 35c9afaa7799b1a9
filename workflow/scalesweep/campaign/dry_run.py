"""The summary a dry run prints at its end on a Slurm site (``snakemake -n``, from
scalesweep.campaign.invocation, from atexit): the points it would submit, the runs the series
selected measure, the Slurm options, the datasets to stage and the images to build
first."""

from __future__ import annotations

import sys
from pathlib import Path

from scalesweep.campaign.estimate import DATASET_JOBS, format_hours, plan_points, plan_series
from scalesweep.plan.kinds import kind_of
from scalesweep.run.slurm import settings_options


def dry_run_summary(listed: dict, config: dict, options: str | None) -> list[str]:
    """What a dry run on a Slurm site submits, in a few lines for its end (campaign.invocation
    prints them): ``listed``, {point path: (point, nodes, runtime in minutes)} of the
    run_point jobs it lists, as their resources were evaluated; the series of the points
    the config selects (``plan_series``); ``options`` the plugin's options from
    the command line as each point's ``# sbatch`` line shows them (``slurm.sbatch_options``
    of no resources), None where they could not be read."""
    from scalesweep.plan.imageset import used_images
    from scalesweep.platform import runtimes
    from scalesweep.plan.payloads import point_inputs

    points = [v[0] for v in listed.values()]
    node_h = sum(int(n or 1) * float(t or 0) for _, n, t in listed.values()) / 60
    series = plan_series(plan_points(config, {}), config)
    minimum = int((series["runs_per_block"] * series["blocks_min"]).sum())
    maximum = int((series["runs_per_block"] * series["blocks_max"]).sum())
    workloads = sorted({p.workload for p in points})
    lines = [
        f"points: {len(points)} run_point jobs listed above ({', '.join(workloads) or 'none'}); "
        f"the {len(series)} series selected measure "
        + (f"{minimum} to {maximum} runs in all, the workflow adding blocks after these "
           f"(adaptive repeats, at most measurement.max_repeats = "
           f"{config['measurement']['max_repeats']} blocks each)"
           if maximum > minimum else f"{minimum} runs in all"),
        f"Slurm jobs: {len(points)} points asking {format_hours(node_h)} node-hours at attempt 1, "
        + ("each with the plugin's options of this command line: "
           f"{options or '(none given: no --slurm-qos ...)'}" if options is not None else
           "the plugin's --slurm-* options of this command line could not be read and "
           "are not shown"),
    ]
    datasets = sorted({config["workloads"][p.workload]["dataset"] for p in points
                       if kind_of(config["workloads"][p.workload]).stages_dataset
                       and not Path(point_inputs(p.workload, p.runtime, config)["verified"])
                       .exists()})
    if datasets:
        lines.append(f"datasets to stage and verify first ({len(DATASET_JOBS)} Slurm jobs "
                     f"each): {', '.join(datasets)}")
    todo = {"build": [], "pull": [], "inject": []}
    for spec in used_images(config, points).values():
        if spec.how in todo and not Path(spec.path).exists():
            todo[spec.how].append(spec.path + (f" ({spec.builder}, {spec.recipe})"
                                               if spec.how == "build" else ""))
    images = "; ".join(f"{how}: {', '.join(paths)}" for how, paths in todo.items() if paths)
    lines.append(f"images, on this host first: {images or 'none to build or pull'}")
    containers = {p.runtime for p in points if not runtimes.is_native(p.runtime)}
    if containers and not any(runtimes.runtime(rt).runs_control for rt in containers):
        builders = sorted({s.builder for s in used_images(config, points).values()})
        lines.append(
            "why (isolation vs software stack, issue #43): not measured, no control image in "
            "this campaign (one carries the host's own stack, built here from a control "
            "recipe: containers/apptainer/control.def, config/frontier_attribution.yaml; this "
            f"campaign's images: {', '.join(builders) or 'none'}); attribution.csv stays empty")
    lines.append("runs and node-hours of the whole selection at the minimum, expected and "
                 "maximum of repeats: scalesweep plan, with the same --directory, "
                 "--configfile, --config and --profile")
    return lines



def print_dry_run_summary(listed: dict, config: dict, settings, out=None, err=None) -> None:
    """``dry_run_summary`` under its heading on ``out`` (stdout), at the end of a dry run
    on a Slurm site (campaign.invocation, from atexit); ``settings`` the Slurm plugin's of the
    command line (``invocation.plugin_settings``), None where they could not be read. Where
    the summary cannot be made, one line on ``err`` (stderr) naming the error instead (in
    an atexit callback an exception prints as "Exception ignored" and a traceback)."""
    try:
        options = None if settings is None else " ".join(settings_options(settings))
        lines = dry_run_summary(listed, config, options)
    except Exception as exc:  # informational: the jobs listed above stand
        print(f"scalesweep: no summary of this dry run ({type(exc).__name__}: {exc}); the "
              "jobs listed above are what it would submit", file=err or sys.stderr)
        return
    print("\nscalesweep, this dry run:\n" + "\n".join(f"  {line}" for line in lines),
          file=out or sys.stdout)
