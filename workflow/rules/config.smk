# The campaign's config: its own file, relative to the campaign (working) directory, with
# --configfile and --config over it, as Snakemake merges them. Read by the workflow (the
# Snakefile includes this first) and by scalesweep's commands, through snakemake.api
# (scalesweep.plan.config_read.effective_config: workflow/scalesweep/plan/read_config.smk).


configfile: "config/config.yaml"
