"""The host environment the commands scalesweep starts need: ``$USER``.

Batch jobs (and some container and CI shells) run without ``$USER``; ch-run and ch-image
refuse to start without it, and site paths use it (``/mnt/bb/$USER``). Every place that
fills it in asks :func:`user_name`. (The payloads in ``scripts/`` cannot import this
package: they keep their own.)
"""

from __future__ import annotations

import os
from typing import MutableMapping


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


def with_user(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """``env`` with ``USER`` set where it lacks it (changed in place, and returned)."""
    env.setdefault("USER", user_name())
    return env
