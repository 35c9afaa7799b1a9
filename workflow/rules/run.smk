# One job per sweep point: launch the payload natively or in a container, write metrics.json.


rule run_point:
    input:
        unpack(run_inputs),
    output:
        metrics="results/runs/{workload}/{runtime}/n{nodes}-g{gpus}-r{ranks}-t{threads}/rep{repeat}/metrics.json",
    log:
        "results/runs/{workload}/{runtime}/n{nodes}-g{gpus}-r{ranks}-t{threads}/rep{repeat}/run.log",
    conda:
        "../../envs/scalesweep.yaml"
    threads: point_cores
    resources:
        # one measurement at a time per machine when run locally (profiles/local sets
        # measure=1), so concurrent points never share cores and distort each other
        measure=1,
    params:
        workload=run_workload,
    script:
        "../scripts/run_point.py"
