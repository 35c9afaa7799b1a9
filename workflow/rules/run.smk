# One job per sweep point: launch the payload natively or in a container, write metrics.json.
# Then, with adaptive repeats, a decision per block of each series, and its final.json.
rule run_point:
    input:
        run_inputs,
    output:
        # results/runs/<scalesweep.plan.sweep.POINT_DIR>/: one layout (common.smk)
        metrics=POINT_METRICS,
    log:
        POINT_LOG,
    # blocks of repeats, runtimes interleaved; below every preparing job (priority 0)
    priority: point_priority
    conda:
        "../../envs/scalesweep.yaml"
    # the site's modules (sites/<name>.yaml: modules), with --sdm env-modules
    envmodules:
        *POINT_MODULES,
    # locally every core Snakemake may use (nothing else of ours runs beside a
    # measurement); on a Slurm site the point's ranks x threads
    threads: MEASUREMENT_THREADS
    resources:
        # nodes, tasks, cpus_per_task, gpu, runtime ...: scalesweep.run.slurm
        **(point_resources(config, refusal) if SLURM_SITE else {}),
        # profiles/local-slurm sets --resources measure=1 and every job's default to 1:
        # one job at a time on the test cluster, whose nodes share this host's cores
        measure=1,
    params:
        # on a Slurm site only (a params function with resources is evaluated per job:
        # ~10% of planning)
        **(dict(launch_comment=launch_comment) if SLURM_SITE else {}),
    shell:
        harness("workflow/scripts/run_point.py")
        + "--metrics {output.metrics:q} --log {log:q}"
        + ("{params.launch_comment}" if SLURM_SITE else "")


# an input of finished points that is gone (a deleted dataset): say before any job that
# they would all be measured again, and how not to (scalesweep.campaign.parse_time)
_remeasure = remeasure_note(config, SELECTED, POINT_METRICS)
if _remeasure:
    print(_remeasure, file=sys.stderr)


# Adaptive repeats (scalesweep.plan.adaptive): after the minimum of blocks, one decision per
# block says whether the series needs another (overhead CI still wider than the target,
# or too few undisturbed repeats), up to measurement.max_repeats.
checkpoint repeats_decision:
    input:
        decision_inputs,
    output:
        # scalesweep.plan.adaptive.DECISION_JSON: `scalesweep status` reads it there too
        DECISION_JSON,
    log:
        f"logs/decisions/{SERIES_DIR}/after{{round}}.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    shell:
        harness("workflow/scripts/decide_repeats.py")
        + "--out {output:q} --round {wildcards.round} {input:q} > {log:q} 2>&1"


# One job per series, so that every series asks for its next block on its own (a failed
# or slow series never holds the others back); its file lists the series' runs.
rule series_done:
    input:
        series_inputs,
    output:
        FINAL_JSON,
    log:
        f"logs/decisions/{SERIES_DIR}/final.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    shell:
        harness("workflow/scripts/decide_repeats.py")
        + "--out {output:q} --final {input:q} > {log:q} 2>&1"
