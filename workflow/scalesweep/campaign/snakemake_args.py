"""The user's Snakemake arguments of a campaign (--profile, --configfile, --config) as
every command scalesweep prints or runs for it passes them on (`scalesweep status`'s
advice, `scalesweep rerun`'s run)."""

from __future__ import annotations

from scalesweep.campaign.usage import UsageError


def user_args(profile: str = "", configfiles=(), config_args=(), extra=None) -> list[str]:
    """The user's --profile, --configfile and --config, as given, ``extra`` config values
    merged in (``config_items``): what every command scalesweep prints or runs for a
    campaign passes on (status, rerun). One --configfile and one --config at most:
    Snakemake keeps only the last of each on a command line."""
    out = ["--profile", profile] if profile else []
    if configfiles:
        out += ["--configfile", *map(str, configfiles)]
    items = config_items(config_args, extra)
    if items:
        out += ["--config", *items]
    return out


def config_items(items=(), extra=None) -> list[str]:
    """The --config KEY=VALUE ``items`` with the ``extra`` values (a mapping, e.g.
    {"sweep": {"repeats": 3}}) merged in as Snakemake merges the items of one --config
    (nested mappings merge, anything else is replaced): a top-level key ``extra`` sets
    becomes one item, at the place of the key's first item (or at the end), its value
    the user's items for it merged with ``extra``'s; every other item stays as given.
    Snakemake keeps only the last --config of a command line (its ``nargs="*"`` option
    is stored, not appended): a second --config would drop the user's items."""
    items = [str(i) for i in items]
    if not extra:
        return items
    from snakemake.utils import update_config

    from scalesweep.platform.snakemake_adapter import parse_config_items

    def key(item: str) -> str:
        return item.split("=", 1)[0]

    out = list(items)
    for name, value in extra.items():
        mine = [i for i in out if key(i) == name]
        try:  # Snakemake's own reading of the user's items for this key
            merged = parse_config_items(mine)
        except ValueError as exc:
            raise UsageError(f"--config {' '.join(mine)}: {exc}") from None
        update_config(merged, {name: _as_text(value)})
        item = f"{name}={_config_value(merged[name])}"
        at = out.index(mine[0]) if mine else len(out)
        out = [i for i in out[:at] if key(i) != name] + [item] + [
            i for i in out[at:] if key(i) != name]
    return out


def _as_text(value):
    """``value`` with every scalar as the text --config's YAML reading (BaseLoader) gives
    it: the workflow types the config's strings by the schema (config.schema_typed)."""
    if isinstance(value, dict):
        return {str(k): _as_text(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_text(v) for v in value]
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)


def _config_value(value) -> str:
    """The VALUE of a --config KEY=VALUE item that Snakemake reads back as ``value``
    (scalesweep.platform.snakemake_adapter.parse_config_items: nested values by YAML's BaseLoader, every scalar a
    string): YAML flow style on one line, scalars plain wherever YAML allows it."""
    import yaml

    if not isinstance(value, (dict, list)):
        return "" if value is None else str(value)

    class Plain(yaml.SafeDumper):
        yaml_implicit_resolvers: dict = {}  # every scalar is text: never quoted as one

    return yaml.dump(_as_text(value), Dumper=Plain, default_flow_style=True,
                     sort_keys=False, width=float("inf")).strip()
