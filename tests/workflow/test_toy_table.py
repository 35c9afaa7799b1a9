"""Adding a report table is three things (docs/extending.md, issue #41): a line in
``TABLES`` of ``scalesweep/report/registry.py``, its caption in ``workflow/report/``, and
the rule that writes ``results/summary/<name>.csv``. On a copy of this repository with
exactly those three added, a dry run of the default target plans the new rule (rule
report_pages asks for every registered table) and its page; without the registry line the
rule cannot name its output."""

from __future__ import annotations

from conftest import run_snakemake
from test_deploy import source_copy


def test_a_toy_table_is_three_additions(tmp_path):
    src = source_copy(tmp_path / "scalesweep")
    registry = src / "workflow/scalesweep/report/registry.py"
    text = registry.read_text()
    anchor = '    "rules": ("rules.rst", ABOUT, None, {"table": "benchmarking rules"}),\n'
    assert anchor in text
    registry.write_text(text.replace(
        anchor, anchor + '    "toy": ("toy.rst", T, None, {"table": "a toy table"}),\n', 1))
    (src / "workflow/report/toy.rst").write_text("A toy table: one row per runtime.\n")
    with open(src / "workflow/rules/report.smk", "a") as fh:
        fh.write('''

rule report_toy:
    input:
        runs=rules.aggregate.output.runs,
    output:
        toy=report_table("toy"),
    localrule: True
    shell:
        "cut -d, -f1 {input.runs:q} > {output.toy:q}"
''')
    (tmp_path / "campaign" / "config").mkdir(parents=True)
    (tmp_path / "campaign" / "config" / "config.yaml").write_text(
        (src / "config" / "config.yaml").read_text())
    dry = run_snakemake(tmp_path / "campaign", "-n", "--cores", "2",
                        snakefile=src / "Snakefile").stdout
    assert "rule report_toy:" in dry and "results/summary/toy.csv" in dry, dry[-3000:]
    assert "results/summary/toy.html" in dry  # its page, made by rule report_pages
    # without its registry line the rule file cannot even name its output
    registry.write_text(text)
    failed = run_snakemake(tmp_path / "campaign", "-n", "--cores", "2",
                           snakefile=src / "Snakefile", check=False)
    assert failed.returncode != 0 and "toy" in failed.stderr
