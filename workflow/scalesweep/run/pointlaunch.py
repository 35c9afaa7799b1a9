"""The launch of one sweep point (``scalesweep.platform.launch.Launch``) from the point, the config
and its site: which launcher starts the ranks (:func:`choose_launcher`) and where they
meet (:func:`rendezvous_env`), the container runtime's facts on the site
(:func:`container_site`), what a run records about its image and runtime
(:func:`image_provenance`, :func:`runtime_provenance`), the node-local staging command,
and the servers and client of a multi-node LLM point.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from scalesweep.measure.slurmjob import first_slurm_host
from scalesweep.record.ports import below_ephemeral, listen_port
from scalesweep.plan.kinds import kinds
from scalesweep.plan.sweep import SweepPoint
from scalesweep.platform.launch import ContainerSite, Launch, LaunchError
from scalesweep.record.pointdir import OUTPUTS_JSONL, PAYLOAD_JSON, SERVERS_DIR


def choose_launcher(configured: str, world_size: int) -> str:
    """One process needs no launcher; inside a Slurm job several ranks go through srun."""
    if world_size == 1:
        return "local"
    if "SLURM_JOB_ID" in os.environ:
        return "srun"
    return configured


def rendezvous_env(launcher: str) -> dict[str, str]:
    if launcher == "srun":
        job = int(os.environ["SLURM_JOB_ID"])
        return {"MASTER_ADDR": first_slurm_host(), "MASTER_PORT": str(below_ephemeral(job))}
    return {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(listen_port()),
            "GLOO_SOCKET_IFNAME": "lo"}


def container_site(config: dict, runtime: str, image: str) -> ContainerSite:
    """The runtime's facts on the campaign's site (sites/<name>.yaml ``runtimes.<name>``;
    a host-MPI mode reads its base runtime's entry and its ``host_mpi`` part), with the
    image to run. A runtime the site does not offer is refused (RuntimeNotOffered)."""
    from scalesweep.platform.runtimes import runtime as runtime_of
    from scalesweep.platform.site import site_of

    return runtime_of(runtime).site_facts(site_of(config), image)


def build_launch(
    point: SweepPoint,
    workload: dict,
    config: dict,
    *,
    payload_args: list[str],
    payload: str,
    data_dir: str,
    out_dir: str,
    image: str = "",
    launcher: str | None = None,
) -> Launch:
    """The point's launch: runtime facts from the site through its runtime class, how
    ranks start (launcher, host Python, extra launcher options) from the site's ``launch``."""
    from scalesweep.platform.site import site_of

    how = site_of(config)["launch"]
    return Launch(
        runtime=point.runtime,
        launcher=launcher or choose_launcher(how["launcher"], point.world_size),
        nodes=point.nodes,
        ranks_per_node=point.ranks,
        threads=point.threads,
        gpus_per_node=point.gpus,
        payload=payload,
        args=tuple(payload_args),
        code_root=str(Path(config["_code_root"]).resolve()),
        data_dir=str(Path(data_dir).resolve()),
        out_dir=str(Path(out_dir).resolve()),
        host_python=how["python"] or sys.executable,
        site=container_site(config, point.runtime, image),
        mpirun_extra=tuple(how["mpirun_extra"]),
        srun_extra=tuple(how["srun_extra"]),
        gpu_bind=how["gpu_bind"],
    )


def image_provenance(manifest: str | None) -> dict[str, Any] | None:
    """What a run records about its image: from the build's manifest (None without one)."""
    if not manifest or not Path(manifest).is_file():
        return None
    m = json.loads(Path(manifest).read_text())
    builder = m.get("builder") or {}
    record = {
        "name": Path(manifest).name.removesuffix(".manifest.json"),
        "path": m.get("image"),
        "format": m.get("format"),
        "source": m.get("source", "built"),  # built | pulled | local
        "pulled_from": m.get("pulled_from"),
        "builder": builder.get("name") if isinstance(builder, dict) else builder,
        "builder_version": builder.get("version") if isinstance(builder, dict) else None,
        "recipe_sha256": (m.get("recipe") or {}).get("sha256"),
        "base": (m.get("base") or {}).get("from"),
        "content_digest": m.get("content_digest"),
        "cache_key": m.get("cache_key"),
        "size_bytes": m.get("size_bytes"),
        # a copy with the host's MPI injected (scalesweep.platform.hostmpi): what, and into which image
        "host_mpi": m.get("host_mpi"),
        "base_content_digest": m.get("base_content_digest"),
    }
    if record["source"] == "local":  # used in place: is it still the image described?
        try:
            st = Path(m["image"]).stat()
            same = st.st_mtime_ns == m.get("mtime_ns") and (not Path(m["image"]).is_file()
                                                            or st.st_size == m.get("size_bytes"))
        except (OSError, KeyError, TypeError):
            same = False
        if not same:
            record["stale"] = ("the image changed (or is gone) since its manifest was written: "
                               "the digest is not this run's; delete the manifest to describe it again")
    return {k: v for k, v in record.items() if v is not None} | {"manifest": str(manifest)}


# The node's GPUs as its vendor tool lists them (the first node of the point, before the
# payload starts): what the run had, in the run's own record. The tools' JSON formats:
# rocm-smi --json ({"card0": {"Card series": ...}}), amd-smi --json ([{"gpu": 0, "asic":
# {"market_name": ...}}]), nvidia-smi --query-gpu CSV.
GPU_INVENTORY_COMMANDS = {
    "rocm": (["amd-smi", "static", "--asic", "--vram", "--json"],
             ["rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json"]),
    "cuda": (["nvidia-smi", "--query-gpu=index,name,memory.total,pci.bus_id",
              "--format=csv,noheader"],),
}


def _gpu_names(tool: str, out: str) -> list[str]:
    if tool == "nvidia-smi":
        return [line.split(",")[1].strip() for line in out.splitlines() if line.count(",") >= 3]
    data = json.loads(out)
    if tool == "amd-smi":
        rows = data if isinstance(data, list) else data.get("gpu_data", [])
        return [str((r.get("asic") or {}).get("market_name", "?")) for r in rows]
    cards = {k: v for k, v in data.items() if k.startswith("card") and isinstance(v, dict)}
    # "Card Series" since ROCm 6.2's rocm-smi, "Card series" before
    return [str(v.get("Card Series") or v.get("Card series") or v.get("Card Model")
                or v.get("Card model") or "?") for _, v in sorted(cards.items())]


def gpu_inventory(device: str, run=None) -> dict[str, Any] | None:
    """The GPUs the vendor's tool lists on this node (None on a CPU site): the tool, its
    command, the device count and names; where no tool answers, the reason."""
    import shutil
    import subprocess

    commands = GPU_INVENTORY_COMMANDS.get(device)
    if not commands:
        return None
    tried = []
    for argv in commands:
        if not shutil.which(argv[0]):
            tried.append(f"{argv[0]}: not found")
            continue
        try:
            proc = (run or subprocess.run)(argv, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError) as exc:
            tried.append(f"{argv[0]}: {exc}")
            continue
        if proc.returncode != 0:
            tried.append(f"{argv[0]}: exit {proc.returncode}")
            continue
        try:
            names = _gpu_names(argv[0], proc.stdout)
        except (ValueError, AttributeError, TypeError) as exc:
            tried.append(f"{argv[0]}: unreadable output ({exc})")
            continue
        return {"tool": argv[0], "command": argv, "count": len(names), "names": names}
    return {"tool": None, "count": None, "error": "; ".join(tried)}


def runtime_provenance(runtime: str, site: ContainerSite) -> dict[str, Any]:
    """What a run records about its container runtime: the runtime class's provenance
    (executable, modules, host MPI, GPU flags) and the ``version`` its executable reports
    (None for native, or where it cannot be run)."""
    from scalesweep.platform.runtimes import runtime as runtime_of
    from scalesweep.platform.runtimes import runtime_version

    return {**runtime_of(runtime).provenance(site), "version": runtime_version(runtime, site)}


def stage_command(launch: Launch, src: str, dest: str) -> list[str]:
    """Copy a verified dataset to node-local storage on every node of the point, and
    verify each copy: one task per node under srun, in-process otherwise."""
    script = str(Path(launch.code_root) / "scripts" / "stage_dataset.py")
    cmd = [launch.host_python, script, "copy", src, dest]
    if launch.launcher == "srun" and launch.nodes > 1:
        return ["srun", f"--nodes={launch.nodes}", "--ntasks-per-node=1", *cmd]
    return cmd


def is_multinode_llm(launch: Launch) -> bool:
    """A point on several nodes of a kind that runs one server per node (LLM)."""
    return launch.nodes > 1 and any(k.server_per_node and k.script == launch.payload
                                    for k in kinds())


def _without(args: tuple[str, ...], options: set[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in options:
            skip = True
        else:
            out.append(a)
    return out


CLIENT_OPTION = "--client-placement"  # the LLM payload's option (workloads.<name>.load.client)
HOST_CLIENT = "host"


def is_host_client_llm(launch: Launch) -> bool:
    """A one-node LLM point in a container whose client runs on the host, outside the
    container (``load.client: host``): its server is started apart from its client."""
    from scalesweep.platform.runtimes import is_native

    args = list(launch.args)
    return (launch.nodes == 1 and not is_native(launch.runtime) and CLIENT_OPTION in args
            and args.index(CLIENT_OPTION) + 1 < len(args)
            and args[args.index(CLIENT_OPTION) + 1] == HOST_CLIENT
            and any(k.server_per_node and k.script == launch.payload for k in kinds()))


def llm_server_client_launches(launch: Launch) -> tuple[Launch, Launch]:
    """The launches of an LLM point whose servers start apart from its client: several
    nodes (``llm_multinode_launches``), or a client on the host (``is_host_client_llm``:
    the server in the container, the client a native process on the same node)."""
    if is_multinode_llm(launch):
        return llm_multinode_launches(launch)
    servers, client = _split(launch)
    return servers, replace(client, runtime="native")


def llm_multinode_launches(launch: Launch) -> tuple[Launch, Launch]:
    """Throughput mode: one server per node (srun, one task per node) and one client on
    the first node spreading the prompt set across all of them."""
    if launch.launcher != "srun":
        raise LaunchError("a multi-node LLM point needs Slurm (srun starts one server per node)")
    return _split(launch)


def _split(launch: Launch) -> tuple[Launch, Launch]:
    """(servers: one per node, --serve-only; client: one process on the first node)."""
    servers_dir = Path(launch.out_dir) / SERVERS_DIR
    base = _without(launch.args, {"--out", "--outputs", "--server-log"})
    server_args = base + [
        "--serve-only", "--host", "0.0.0.0", "--port", "0",
        "--ready-file", str(servers_dir / "ready-{rank}"),
        "--stop-file", str(servers_dir / "stop"),
        "--out", str(servers_dir / "server-{rank}.json"),
        "--server-log", str(servers_dir / "server-{rank}.log"),
    ]
    client_args = base + [
        "--out", str(Path(launch.out_dir) / PAYLOAD_JSON),
        "--outputs", str(Path(launch.out_dir) / OUTPUTS_JSONL),
    ]
    servers = replace(launch, ranks_per_node=1, args=tuple(server_args))
    client = replace(launch, launcher="local", nodes=1, ranks_per_node=1, args=tuple(client_args))
    return servers, client
