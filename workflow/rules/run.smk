# One job per sweep point: launch the payload natively or in a container, write metrics.json.


def run_inputs(wildcards):
    point = point_of(wildcards)
    wl = config["workloads"][point.workload]
    inputs = {}
    if wl["payload"] == "cnn":
        inputs["dataset"] = f"resources/datasets/{wl['dataset']}"
        inputs["verified"] = f"resources/datasets/{wl['dataset']}.verified.json"
    return inputs


def point_cores(wildcards):
    point = point_of(wildcards)
    return point.ranks * point.threads


def run_workload(wildcards):
    return config["workloads"][wildcards.workload]


rule run_point:
    input:
        unpack(run_inputs),
    output:
        metrics=RUN_DIR + "/metrics.json",
    log:
        RUN_DIR + "/run.log",
    params:
        workload=run_workload,
    threads: point_cores
    resources:
        # one measurement at a time per machine when run locally (profiles/local sets
        # measure=1), so concurrent points never share cores and distort each other
        measure=1,
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/run_point.py"
