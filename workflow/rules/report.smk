# The publishable report: per-workload figures, container start-up apart from the workloads,
# and the tables a reader needs to trust them (provenance, missing and failed points).
# Everything reads the aggregate tables, so it follows analysis.partial like aggregate does.
# A rule that reads the runs' own files finds them in runs.csv (path: the metrics files the
# summary used, scalesweep.analyse.collect.summarised_metrics): 10,000 more inputs per rule
# cost Snakemake about a second of planning each, and runs.csv, made from them all, orders
# and re-runs the job as they would.
# Labels come from the config's sweep, not from the data (scalesweep.report.registry).


rule report_run_tables:
    input:
        runs=rules.aggregate.output.runs,
        series=SERIES_FINAL,
    output:
        epochs=report_table("epochs"),
        provenance=report_table("provenance"),
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
        parity=report_table("accuracy_parity"),
        rate=report_table("achieved_rate"),
        mpi=report_table("mpi"),
        data_path=report_table("data_path"),
        concurrency=report_table("llm_concurrency"),
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


rule report_decomposition:
    input:
        runs=rules.aggregate.output.runs,
    output:
        decomposition=report_table("decomposition"),
        differences=report_table("differences"),
        figure=report(
            "results/plots/decomposition.png",
            caption="../report/decomposition_figure.rst",
            category="Container overhead",
            subcategory="where the cost goes",
            labels={"item": "figure: the overhead by component, 95% CI"},
        ),
    log:
        "logs/report/decomposition.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_decomposition.py"


# Why the container differs: isolation vs software stack, where a control image runs
# (scalesweep.analyse.attribution), and the stack's cause where scalesweep ablate ran
rule report_attribution:
    input:
        overhead=rules.aggregate.output.overhead,
        decomposition=rules.report_decomposition.output.decomposition,
        ablation=ablation_csv,
    output:
        attribution=report_table("attribution"),
    log:
        "logs/report/attribution.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_attribution.py"


rule report_load:
    input:
        load=rules.aggregate.output.load,
        runs=rules.aggregate.output.runs,
    output:
        latency=report(
            "results/plots/load/latency_throughput.png",
            caption="../report/load_latency.rst",
            category="LLM serving under load",
            subcategory="figures",
            labels={"item": "figure: latency vs throughput, Pareto front"},
        ),
        goodput=report(
            "results/plots/load/goodput.png",
            caption="../report/load_goodput.rst",
            category="LLM serving under load",
            subcategory="figures",
            labels={"item": "figure: goodput vs request rate"},
        ),
        distributions=report(
            "results/plots/load/distributions.png",
            caption="../report/load_distributions.rst",
            category="LLM serving under load",
            subcategory="figures",
            labels={"item": "figure: TTFT and TPOT distributions"},
        ),
    log:
        "logs/report/load.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    params:
        # each LLM workload's latency target (a changed target draws the figures again)
        targets=load_targets(POINTS, config),
    script:
        "../scripts/report_load.py"


rule report_points:
    input:
        points=rules.aggregate.output.points,
    output:
        missing=report_table("missing"),
        figure=report(
            "results/plots/completeness.png",
            caption="../report/completeness.rst",
            category="Sweep completeness",
            subcategory="all requested points",
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
            labels=workload_labels(POINTS, config, "efficiency vs count"),
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
            labels=workload_labels(POINTS, config, "overhead per point, 95% CI"),
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
            labels=workload_labels(POINTS, config, "per-epoch time distribution"),
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
            labels=workload_labels(POINTS, config, "peak RSS"),
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
        runs=rules.aggregate.output.runs,
        series=SERIES_FINAL,
    output:
        timeline="results/summary/memory_timeline.csv",
        peaks=report_table("memory"),
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
            labels=workload_labels(POINTS, config, "memory over time"),
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
        IMAGE_RULES.startup_results(rules.container_startup.output[0]),
    output:
        report_table("startup"),
    log:
        "logs/report/startup_table.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_startup.py"


# Start-up at scale (issue #44): the measured curves, the model and its prediction
# (scalesweep.analyse.startmodel); tables without rows where startup_scale is off
rule report_startup_scale:
    input:
        expand(rules.startup_scale.output[0], runtime=IMAGE_RULES.scale_runtimes()),
    output:
        curves=report_table("startup_scale"),
        model=report_table("startup_model"),
    log:
        "logs/report/startup_scale.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_startup_scale.py"


rule report_startup_scale_figure:
    input:
        **rules.report_startup_scale.output,
    output:
        report(
            "results/plots/startup_scale.png",
            caption="../report/startup_scale_figure.rst",
            category="Container start-up",
            subcategory="at scale",
            labels={"runtime": "all", "item": "figure: measured, model, prediction"},
        ),
    log:
        "logs/report/startup_scale_figure.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    script:
        "../scripts/report_startup_scale.py"


rule report_summary:
    input:
        runs=rules.aggregate.output.runs,
        scaling=rules.aggregate.output.scaling,
        llm=rules.aggregate.output.llm,
        overhead=rules.aggregate.output.overhead,
        points=rules.aggregate.output.points,
    output:
        made=report_table("made"),
        significance=report_table("significance"),
        rules=report_table("rules"),
    log:
        "logs/report/summary.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    params:
        # made.csv's site and machine rows (a changed site file makes them again)
        site={k: SITE.get(k) for k in ("name", "description", "scheduler", "node")},
    script:
        "../scripts/report_summary.py"


# The first screen of report.html (front.html, embedded by workflow/report/workflow.rst)
# and every summary table as a table to read (<name>.html beside <name>.csv).
rule report_pages:
    input:
        **{name: registry.table_csv(name) for name in registry.TABLES},
    output:
        **{name: report_table(name, view=True) for name in registry.TABLES},
        front=report(
            "results/summary/front.html",
            caption="../report/front.rst",
            category="About this report",
            labels={"table": "first screen: verdicts, caveats, scaling, campaign"},
        ),
    log:
        "logs/report/pages.log",
    localrule: True
    conda:
        "../../envs/scalesweep.yaml"
    params:
        titles={name: registry.table_title(name) for name in registry.TABLES},
    script:
        "../scripts/report_pages.py"
