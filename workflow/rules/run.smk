# One job per sweep point: launch the payload natively or in a container, write metrics.json.


rule run_point:
    input:
        run_inputs,
    output:
        metrics="results/runs/{workload}/{runtime}/n{nodes}-g{gpus}-r{ranks}-t{threads}/rep{repeat}/metrics.json",
    log:
        "results/runs/{workload}/{runtime}/n{nodes}-g{gpus}-r{ranks}-t{threads}/rep{repeat}/run.log",
    conda:
        "../../envs/scalesweep.yaml"
    threads: point_cores
    resources:
        # Through Slurm (profiles/local-slurm, frontier, odo): one job per point with the
        # point's exact geometry (scalesweep.slurm); declared only under a Slurm site
        # profile (common.smk: RUN_POINT_SLURM_RESOURCES).
        **RUN_POINT_SLURM_RESOURCES,
        # one measurement at a time per machine when run locally (profiles/local sets
        # measure=1), so concurrent points never share cores and distort each other
        measure=1,
    shell:
        RUN_POINT_SHELL
