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
        # Through Slurm (profiles/local-slurm, frontier, odo): one job per point with the
        # point's exact geometry; scalesweep.slurm documents each value. None = not set.
        nodes=slurm_nodes,
        tasks=slurm_tasks,  # ranks, when 1 per node (several ranks only)
        tasks_per_node=slurm_tasks_per_node,  # ranks per node, when > 1
        mpi=slurm_mpi,  # "srun" with several ranks: no `srun -n1` around the job
        cpus_per_task=slurm_cpus_per_task,  # threads per rank (Frontier: 7)
        gpu=slurm_gpu,  # one process with G GPUs: --gpus=G
        slurm_extra=slurm_extra,  # --gpus-per-task/--gpu-bind, --core-spec, site extras
        runtime=slurm_runtime,  # minutes; doubles with each retry, capped by the site
        mem_mb=slurm_mem_mb,  # per node; 0 = no --mem (the node's default)
        constraint=slurm_constraint,  # nvme when the dataset is staged node-locally
    params:
        workload=run_workload,
    script:
        "../scripts/run_point.py"
