"""What the records of a campaign's series say (``final.json``, as rule series_done
writes it): a series' last decision, and the series that stopped as futile. Read by
`scalesweep status`."""

from __future__ import annotations

import json
from pathlib import Path

from scalesweep.plan.adaptive import decision_problem, final_path, series_of
from scalesweep.plan.sweep import sweep_points


def last_decision(directory: Path, series, problems: list[tuple[str, str]]) -> dict:
    """The last decision of ``series`` as its final.json records it ({} without one); a
    file that cannot be read as such goes to ``problems`` as (file, why)."""
    final = final_path(directory, series)
    try:
        record = json.loads(final.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        problems.append((str(final), f"not readable as JSON ({exc})"))
        return {}
    if not isinstance(record, dict):
        problems.append((str(final), f"a JSON {type(record).__name__}, not a series "
                                     "record (an object)"))
        return {}
    last = record.get("last_decision")
    why = None if last is None else decision_problem(last)
    if why:
        problems.append((str(final), f"last_decision: {why}"))
        return {}
    return last or {}


def futile_series(config: dict, directory: Path,
                  problems: list[tuple[str, str]]) -> list[str]:
    """"<series>: <why>" for every series that stopped before its maximum because its
    verdict cannot be settled within max_repeats at the measured spread (its last
    decision's ``futility``: ``scalesweep.analyse.decision.decide``)."""
    lines = []
    for series in series_of(sweep_points(config)):
        for text in last_decision(directory, series, problems).get("futility") or []:
            lines.append(f"{series.path}: {text}")
    return lines
