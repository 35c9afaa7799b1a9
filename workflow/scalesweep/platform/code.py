"""Where scalesweep's own files are, named once: the tree that holds the Snakefile, the
rules and schemas (workflow/), the site files (sites/), the profiles (profiles/), the
image recipes (containers/), the payloads (scripts/) and the embedded default config
(config/). Every module that reads one of them asks here (a clone or an editable install:
the directory above ``workflow/``, where this package lies).
"""

from __future__ import annotations

from pathlib import Path

CODE_ROOT = Path(__file__).resolve().parents[3]
WORKFLOW_DIR = CODE_ROOT / "workflow"
SCHEMAS_DIR = WORKFLOW_DIR / "schemas"
SITES_DIR = CODE_ROOT / "sites"
PROFILES_DIR = CODE_ROOT / "profiles"
PAYLOADS_DIR = CODE_ROOT / "scripts"
