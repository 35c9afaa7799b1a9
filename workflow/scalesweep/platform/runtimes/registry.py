"""The runtimes by name: :func:`register` makes a class known (each runtime module of
this package decorates its classes with it), :func:`runtime` gives the one for a runtime
token (``<name>`` or ``<name>+<mode>``), and the lists the config, the sweep and the report
ask for (names, tokens, native and container runtimes, builders, site keys)."""

from __future__ import annotations

from scalesweep.platform.runtimes.base import MODE_SEP, Runtime, RuntimeSite, UnknownRuntime, split_token

_REGISTRY: dict[str, Runtime] = {}


def register(cls: type[Runtime]) -> type[Runtime]:
    """Class decorator: make the runtime known by ``cls.name``."""
    existing = _REGISTRY.get(cls.name)
    if existing is not None and type(existing) is not cls:
        raise ValueError(f"runtime {cls.name!r} is already registered ({type(existing).__name__})")
    _REGISTRY[cls.name] = cls()
    return cls


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)
    for token in [t for t in _MODED if split_token(t)[0] == name]:
        del _MODED[token]


_MODED: dict[str, Runtime] = {}


def runtime(name: str) -> Runtime:
    """The registered runtime ``name``, a runtime token (``<name>+<mode>``: that runtime in
    that mode); refused with the names that are known, or the modes the runtime has."""
    base, mode = split_token(name)
    try:
        rt = _REGISTRY[base]
    except KeyError:
        raise UnknownRuntime(f"unknown runtime {name!r}; known: {', '.join(names())}") from None
    if not mode:
        return rt
    moded = _MODED.get(name)
    if moded is None or type(moded) is not type(rt):
        moded = _MODED[name] = rt.with_mode(mode)
    return moded


def _ordered() -> list[tuple[str, Runtime]]:
    """The registry by each runtime's ``order``, then registration order."""
    return sorted(_REGISTRY.items(), key=lambda item: item[1].order)


def names() -> tuple[str, ...]:
    """Every runtime, by ``order`` (the report's colour order)."""
    return tuple(n for n, _ in _ordered())


def tokens() -> tuple[str, ...]:
    """Every runtime token: each runtime by ``order``, then its other modes."""
    return tuple(token for n, rt in _ordered()
                 for token in (n, *(f"{n}{MODE_SEP}{m}" for m in list(rt.modes)[1:])))


def mode_of(token: str) -> str | None:
    """The mode a runtime token runs (its runtime's default for a plain name); None for a
    runtime without modes (native) or an unknown token."""
    try:
        return runtime(token).run_mode or None
    except LaunchError:
        return None


def native_names() -> tuple[str, ...]:
    return tuple(n for n, rt in _ordered() if rt.native)


def container_names() -> tuple[str, ...]:
    """Every container runtime token (each runtime's modes included)."""
    return tuple(t for t in tokens() if not _REGISTRY[split_token(t)[0]].native)


def is_native(name: str) -> bool:
    rt = _REGISTRY.get(split_token(name)[0])
    return rt is not None and rt.native


def site_keys() -> tuple[str, ...]:
    """The entries a site file may have under ``runtimes:`` (one per container runtime)."""
    return tuple(dict.fromkeys(rt.site_key for _, rt in _ordered() if rt.site_key))


def builders() -> tuple[str, ...]:
    """Runtimes that build images (``scalesweep build-image --builder``)."""
    return tuple(n for n, rt in _ordered() if rt.recipe_kind and not rt.host_mpi)


def runtime_version(name: str, site: RuntimeSite, run=None) -> str | None:
    """Run the runtime's version command (``run``: a ``subprocess.run`` stand-in in
    tests); None for native or when the executable cannot be run."""
    import subprocess

    argv = runtime(name).version_command(site.bin)
    if not argv:
        return None
    try:
        proc = (run or subprocess.run)(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:
        return None
    return Runtime.parse_version(proc.stdout or proc.stderr)  # ch-run prints to stderr
