# The publishable report: per-workload figures, container start-up apart from the workloads,
# and the tables a reader needs to trust them (provenance, missing and failed points).
# Everything reads the aggregate tables, so it follows analysis.partial like aggregate does.


rule report_run_tables:
    input:
        metrics=aggregate_metrics,
        series=series_final_files(),
    output:
        epochs=report(
            "results/summary/epochs.csv",
            caption="../report/epochs_table.rst",
            category="Tables",
            labels={"table": "per-epoch times"},
        ),
        provenance=report(
            "results/summary/provenance.csv",
            caption="../report/provenance.rst",
            category="Provenance",
            labels={"table": "per-run provenance"},
        ),
    log:
        "logs/report/run_tables.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_run_tables.py"


rule report_tables:
    input:
        runs=rules.aggregate.output.runs,
    output:
        parity=report(
            "results/summary/accuracy_parity.csv",
            caption="../report/accuracy_parity.rst",
            category="Tables",
            labels={"table": "accuracy parity"},
        ),
        rate=report(
            "results/summary/achieved_rate.csv",
            caption="../report/achieved_rate.rst",
            category="Tables",
            labels={"table": "achieved FLOP rate"},
        ),
        mpi=report(
            "results/summary/mpi.csv",
            caption="../report/mpi_table.rst",
            category="Tables",
            labels={"table": "MPI library and Allreduce"},
        ),
        data_path=report(
            "results/summary/data_path.csv",
            caption="../report/data_path.rst",
            category="Tables",
            labels={"table": "data path"},
        ),
        concurrency=report(
            "results/summary/llm_concurrency.csv",
            caption="../report/llm_concurrency.rst",
            category="Tables",
            labels={"table": "LLM concurrency levels"},
        ),
    log:
        "logs/report/tables.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    params:
        # the site's peak (percent of peak): a changed peak makes the tables again
        node=SITE["node"],
    script:
        "../scripts/report_tables.py"


rule report_points:
    input:
        points=rules.aggregate.output.points,
    output:
        missing=report(
            "results/summary/missing.csv",
            caption="../report/missing.rst",
            category="Sweep completeness",
            labels={"item": "table: missing and failed points"},
        ),
        figure=report(
            "results/plots/completeness.png",
            caption="../report/completeness.rst",
            category="Sweep completeness",
            labels={"item": "figure: finished repeats per point"},
        ),
    log:
        "logs/report/points.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_points.py"


rule report_efficiency:
    input:
        scaling=rules.aggregate.output.scaling,
        runs=rules.aggregate.output.runs,
        points=rules.aggregate.output.points,
    output:
        report(
            "results/plots/efficiency/{workload}.png",
            caption="../report/efficiency.rst",
            category="Scaling efficiency",
            subcategory="{workload}",
            labels=workload_report_labels("efficiency vs count"),
        ),
    log:
        "logs/report/efficiency/{workload}.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_workload_figure.py"


rule report_overhead:
    input:
        overhead=rules.aggregate.output.overhead,
        points=rules.aggregate.output.points,
    output:
        report(
            "results/plots/overhead/{workload}.png",
            caption="../report/overhead.rst",
            category="Container overhead",
            subcategory="{workload}",
            labels=workload_report_labels("overhead per point, 95% CI"),
        ),
    log:
        "logs/report/overhead/{workload}.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_workload_figure.py"


rule report_epoch_times:
    input:
        epochs=rules.report_run_tables.output.epochs,
        points=rules.aggregate.output.points,
    output:
        report(
            "results/plots/epoch_times/{workload}.png",
            caption="../report/epoch_times.rst",
            category="Per-epoch time",
            subcategory="{workload}",
            labels=workload_report_labels("per-epoch time distribution"),
        ),
    log:
        "logs/report/epoch_times/{workload}.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_workload_figure.py"


rule report_memory:
    input:
        runs=rules.aggregate.output.runs,
        points=rules.aggregate.output.points,
    output:
        report(
            "results/plots/memory/{workload}.png",
            caption="../report/memory.rst",
            category="Peak memory",
            subcategory="{workload}",
            labels=workload_report_labels("peak RSS"),
        ),
    log:
        "logs/report/memory/{workload}.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_workload_figure.py"


rule report_memory_tables:
    input:
        metrics=aggregate_metrics,
        series=series_final_files(),
    output:
        timeline="results/summary/memory_timeline.csv",
        peaks=report(
            "results/summary/memory.csv",
            caption="../report/memory_table.rst",
            category="Tables",
            labels={"table": "peak memory, native vs containers"},
        ),
    log:
        "logs/report/memory_tables.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_memory.py"


rule report_memory_timeline:
    input:
        timeline=rules.report_memory_tables.output.timeline,
        points=rules.aggregate.output.points,
    output:
        report(
            "results/plots/memory_timeline/{workload}.png",
            caption="../report/memory_timeline.rst",
            category="Peak memory",
            subcategory="{workload}",
            labels=workload_report_labels("memory over time"),
        ),
    log:
        "logs/report/memory_timeline/{workload}.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_memory.py"


rule report_startup:
    input:
        rules.container_startup.output,
    output:
        report(
            "results/plots/startup/{runtime}.png",
            caption="../report/startup.rst",
            category="Container start-up",
            subcategory="{runtime}",
            labels={"runtime": "{runtime}", "item": "figure: start-up vs native"},
        ),
    log:
        "logs/report/startup/{runtime}.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_startup.py"


rule report_startup_table:
    input:
        expand(rules.container_startup.output, runtime=container_runtimes()),
    output:
        report(
            "results/summary/startup.csv",
            caption="../report/startup_table.rst",
            category="Container start-up",
            subcategory="all container runtimes",
            labels={"runtime": "all", "item": "table: medians native vs container"},
        ),
    log:
        "logs/report/startup_table.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_startup.py"


rule report_summary:
    input:
        runs=rules.aggregate.output.runs,
        scaling=rules.aggregate.output.scaling,
        llm=rules.aggregate.output.llm,
        overhead=rules.aggregate.output.overhead,
        points=rules.aggregate.output.points,
    output:
        made=report(
            "results/summary/made.csv",
            caption="../report/made.rst",
            category="About this report",
            labels={"table": "made from"},
        ),
        significance=report(
            "results/summary/significance.csv",
            caption="../report/significance.rst",
            category="About this report",
            labels={"table": "many comparisons: chance and FDR"},
        ),
        rules=report(
            "results/summary/rules.csv",
            caption="../report/rules.rst",
            category="About this report",
            labels={"table": "benchmarking rules"},
        ),
    log:
        "logs/report/summary.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_summary.py"
