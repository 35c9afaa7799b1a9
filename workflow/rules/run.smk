# One job per sweep point: launch the payload natively or in a container, write metrics.json.


rule run_point:
    input:
        run_inputs,
    output:
        # results/runs/<scalesweep.plan.sweep.POINT_DIR>/: one layout (common.smk: POINT_METRICS)
        metrics=POINT_METRICS,
    log:
        POINT_LOG,
    # blocks of repeats, runtimes interleaved; below every preparing job (priority 0)
    priority: point_priority
    conda:
        "../../envs/scalesweep.yaml"
    # locally every core Snakemake may use (nothing else of ours runs beside a
    # measurement); on a Slurm site the point's ranks x threads
    threads: MEASUREMENT_THREADS
    resources:
        # Through Slurm (profiles/local-slurm, frontier, odo): one job per point with the
        # point's exact geometry (scalesweep.run.slurm); declared only on a site whose
        # scheduler is Slurm (common.smk: RUN_POINT_SLURM_RESOURCES).
        **RUN_POINT_SLURM_RESOURCES,
        # profiles/local-slurm sets --resources measure=1 and every job's default to 1:
        # one job at a time on the test cluster, whose nodes share this host's cores
        measure=1,
    params:
        # on a Slurm site, the job's sbatch options and the point's srun line, a comment
        # at the end of the command that dry runs print (common.smk); none elsewhere
        # (a params function with resources is evaluated per job: ~10% of planning)
        **RUN_POINT_PARAMS,
    shell:
        RUN_POINT_COMMAND


# an input of finished points that is gone (a deleted dataset): say before any job that
# they would all be measured again, and how not to (common.smk: remeasure_note)
_remeasure = remeasure_note()
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
        DECISION_LOG,
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    shell:
        DECIDE_ROUND_SHELL


# One job per series, so that every series asks for its next block on its own (a failed
# or slow series never holds the others back); its file lists the series' runs.
rule series_done:
    input:
        series_inputs,
    output:
        FINAL_JSON,
    log:
        FINAL_LOG,
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    shell:
        DECIDE_FINAL_SHELL
