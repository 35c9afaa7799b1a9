"""Where scalesweep's own files are, named once: the tree that holds the Snakefile, the
rules and schemas (workflow/), the site files (sites/), the profiles (profiles/), the
image recipes (containers/), the payloads (scripts/) and the embedded default config
(config/). Every module that reads one of them asks here.

Where the tree is: in an installed wheel, the package's own copy of it,
``scalesweep/_tree`` (setup.py's build step; found through ``importlib.resources``); in
a clone or an editable install (and in that copy itself, which the Snakefile there puts
first on ``sys.path``), the directory that holds this package's ``workflow/`` folder.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

PACKAGED_TREE = "_tree"  # setup.py: BuildWithTree


def code_root() -> Path:
    """The tree the workflow runs from (above)."""
    packaged = Path(str(resources.files("scalesweep") / PACKAGED_TREE))
    if (packaged / "Snakefile").is_file():
        return packaged
    return Path(__file__).resolve().parents[3]  # <root>/workflow/scalesweep/platform/code.py


CODE_ROOT = code_root()
WORKFLOW_DIR = CODE_ROOT / "workflow"
SCHEMAS_DIR = WORKFLOW_DIR / "schemas"
SITES_DIR = CODE_ROOT / "sites"
PROFILES_DIR = CODE_ROOT / "profiles"
PAYLOADS_DIR = CODE_ROOT / "scripts"
