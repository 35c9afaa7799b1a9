"""A config only the real workflow refuses: Snakemake stops before any job (split from
tests/workflow/test_config_fuzz.py, whose helpers it uses)."""


import pytest

from conftest import run_snakemake
from test_config_fuzz import llm_config


@pytest.mark.integration
def test_max_tokens_beyond_the_models_context_stops_snakemake_before_any_job(campaign):
    from scalesweep.plan.payload_scripts import payload_script

    context = payload_script("make_synthetic_llm").SyntheticConfig().ctx  # the generator's
    wd = campaign(llm_config({"source": "synthetic"}))
    proc = run_snakemake(wd, "-n", "--config", "workloads={llm: {max_tokens: 1000000000000}}",
                         check=False)
    err = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config key workloads.llm.max_tokens: 1000000000000 does not fit the context of " \
           f"model 'm' ({context} tokens: its generator's context_length" in err, err[-3000:]
    assert f"set max_tokens below {context}" in err
    assert not (wd / "results").exists() and not (wd / "resources").exists()
