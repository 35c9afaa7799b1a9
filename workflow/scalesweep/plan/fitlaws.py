"""The scaling laws fitted to training series (scalesweep.analyse.fits fits them), as
far as planning needs them: their parameters, how many distinct counts a fit needs, and
which series of a sweep get a fit figure (rule plot_fit). Standard library only: the
Snakefile asks this while it plans, and numpy, pandas and scipy cost it a second."""

from __future__ import annotations

MODELS: dict[str, tuple[str, ...]] = {
    "amdahl": ("t1_s", "serial_fraction"),
    "usl": ("t1_s", "sigma", "kappa"),
}


def min_counts(model: str) -> int:
    """Distinct counts a fit needs: parameters + 1 (one degree of freedom left)."""
    return len(MODELS[model]) + 1


def can_fit(counts) -> bool:
    """Whether a series swept at ``counts`` has enough distinct counts for any law."""
    return len(set(counts)) >= min(min_counts(model) for model in MODELS)


def figure_series(points, config: dict) -> list[tuple[str, str]]:
    """The (workload, runtime) training series of a sweep that get a fit figure (rule
    plot_fit): those with a threads-per-rank series whose swept counts ``can_fit``. The
    others get none (a figure with nothing fitted is not listed); fits.csv says why."""
    from scalesweep.plan.kinds import kind_of

    counts: dict[tuple, set] = {}
    for p in points:
        kind = kind_of(config["workloads"][p.workload])
        if kind.summary_table == "scaling":
            counts.setdefault((p.workload, p.runtime, p.threads), set()).add(
                kind.scaling_count(p))
    return sorted({(w, r) for (w, r, _), swept in counts.items() if can_fit(swept)})


def figure_keywords(points, config: dict) -> dict[str, list[str]]:
    """``figure_series`` as the keywords of Snakemake's expand(..., zip): one fit figure
    each (rule plot_fit)."""
    series = figure_series(points, config)
    return {"workload": [w for w, _ in series], "runtime": [r for _, r in series]}
