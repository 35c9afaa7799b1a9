"""The host environment the commands scalesweep starts need: ``$USER``.

Batch jobs (and some container and CI shells) run without ``$USER``; ch-run and ch-image
refuse to start without it, and site paths use it (``/mnt/bb/$USER``). Every place that
fills it in asks :func:`user_name`. (The payloads in ``scripts/`` cannot import this
package: they keep their own.)
"""

from __future__ import annotations

import os
import re
from typing import Mapping, MutableMapping

ENV_REF = re.compile(r"\$(\w+)|\$\{(\w+)\}")  # $VAR or ${VAR}


def user_name() -> str:
    """``$USER``; else this process's user in the password database; else its uid."""
    user = os.environ.get("USER")
    if user:
        return user
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without an entry (some containers)
        return str(os.getuid())


def expand_vars(text: str, environ: Mapping[str, str]) -> str:
    """``$VAR`` and ``${VAR}`` from ``environ``; unknown ones left as written (the rule of
    ``os.path.expandvars``, for any mapping)."""
    return ENV_REF.sub(lambda m: environ.get(m[1] or m[2], m[0]), text)


def with_user(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """``env`` with ``USER`` set where it lacks it (changed in place, and returned)."""
    env.setdefault("USER", user_name())
    return env
