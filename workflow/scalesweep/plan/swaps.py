"""The items of the software stack a one-factor ablation can swap (issue #43): each is one
item of the workload image put into the control image (the host's own stack) in its
place, by the control recipe's build arg ``SWAP_IN`` (``scalesweep build-image
--host-stack --swap ITEM``; containers/charliecloud/Dockerfile.control does it). A campaign
whose workload image is such a swap image (``containers.images.<name>.swap``) measures,
as its attribution's stack component, what that one item changes
(:mod:`scalesweep.analyse.ablation`, ``scalesweep ablate``).

Each item names the rows of ``differences.csv`` it covers (``item`` prefixes), so the
ablation plans only the items whose difference the campaign recorded. Standard library
only (``build-image`` imports it).
"""

from __future__ import annotations

from dataclasses import dataclass

BUILD_ARG = "SWAP_IN"  # the control recipe's build arg: the items swapped in, by name


@dataclass(frozen=True)
class Swap:
    name: str
    label: str  # as the report's sentence says it: "carried by <label>"
    what: str  # what the swap image carries in place of the host's
    covers: tuple[str, ...]  # differences.csv items (prefixes) this item accounts for
    # the recipe kinds (Runtime.recipe_kind) whose control recipe can swap it in
    recipe_kinds: tuple[str, ...] = ("dockerfile", "definition")


SWAPS = {s.name: s for s in (
    Swap("interpreter", "the Python build",
         "the release's python3 (the workload image's interpreter build) in place of the "
         "host's, the same wheels in its venv",
         ("python version", "python build", "python compiler", "python implementation",
          "python: libpython"),
         # the workload image's interpreter is its base release's python3: Charliecloud's
         # and Podman's control image share that base (Debian); Frontier's Apptainer
         # workload image is Ubuntu's, the control image the host's SLES: not swappable
         ("dockerfile",)),
    Swap("bytecode", "the byte code's validation",
         "the packages' byte code compiled as the workload image's build compiles it "
         "(hash-checked .pyc: each import reads and hashes the source too) in place of the "
         "host's timestamp .pyc",
         ("python bytecode",)),
)}


def swap(name: str) -> Swap:
    if name not in SWAPS:
        raise ValueError(f"swap item {name!r} is not one the control recipe can swap "
                         f"(it can: {', '.join(SWAPS)})")
    return SWAPS[name]


def covering(item: str) -> str | None:
    """The swap item that covers a differences.csv ``item``, or None."""
    for s in SWAPS.values():
        if any(item == c or item.startswith(c) for c in s.covers):
            return s.name
    return None
