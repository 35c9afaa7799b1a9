# How scalesweep's commands read a campaign's config (scalesweep.plan.config_read.
# effective_config): Snakemake reads it, through snakemake.api, with the workflow's own
# configfile directive; nothing else of the workflow is parsed.


include: "../../rules/config.smk"


from scalesweep.plan.config_read import receive_config

receive_config(config)
