"""This run of the workflow: its command line as Snakemake read it, the profile checked
against the site before any job, and on a Slurm site what each point's job is.

The workflow (``workflow/rules/common.smk``) makes one ``Invocation`` each time it is
parsed; inside a Slurm job (every job parses the workflow again, to run that one job) it
reads no command line and checks nothing:

* ``problem()``: why the profile does not fit the site (a Slurm site without a Slurm
  profile, an account from an unset variable, a Slurm profile on a site without Slurm);
  the workflow refuses it before its first job, dry runs included;
* ``launch_comment(point, workload, resources)``: on a Slurm site, the comment rule
  run_point's command ends in, printed by a dry run (the Slurm profiles set
  printshellcmds) and inert when it runs::

    python .../run_point.py ...  # sbatch -A abc123 -p batch -t 30 -C nvme --nodes=2 ...
    ; OMP_NUM_THREADS=7 ... srun --nodes=2 --ntasks=16 ... apptainer exec --rocm ...

  the options the Slurm executor plugin submits the job with (``run.slurm.sbatch_options``
  of the job's evaluated resources and the plugin's settings of this command line) and
  the line the point launches its payload with inside the job (``run.slurm.srun_template``),
  after the site's ``module purge && module load ...`` where the command line deploys
  environment modules (``--sdm env-modules``: Frontier's profile);
* a dry run on a Slurm site ends with a summary (``campaign.dry_run``), from atexit:
  Snakemake runs no onsuccess or onerror hook in a dry run.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
from typing import Any, Mapping, Sequence

from scalesweep.platform import snakemake_adapter
from scalesweep.platform.site import point_modules
from scalesweep.run.slurm import (POINT_SLOT, account_problem, sbatch_options,
                                  srun_template)

# Options whose relative path Snakemake resolves against the directory it started in,
# which --directory has left by the time the workflow is parsed.
PATH_OPTIONS = ("--profile", "--workflow-profile", "--snakefile", "-s")
# the options of a command that runs no job: the profile is not checked for it
NO_JOBS = ("lint", "report", "list_rules", "list_target_rules", "summary",
           "detailed_summary", "unlock", "dag", "rulegraph", "filegraph")


def in_slurm_job(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process runs inside a Slurm job (the Slurm plugin's job step keeps
    SLURM_JOB_ID): every job parses the workflow again, to run that one job."""
    return "SLURM_JOB_ID" in environ


def started_argv(argv: Sequence[str], start: str, environ: Any = os.environ) -> list[str] | None:
    """``argv`` as Snakemake read it when it started in ``start``, made to read the same
    from any directory, never changing directory: each relative path of ``PATH_OPTIONS``
    (and ``$SNAKEMAKE_PROFILE`` without a ``--profile``) that exists under ``start`` made
    absolute there; without ``--snakefile``, the Snakefile Snakemake finds in ``start``
    (its workflow profile, profiles/default, is looked for beside it). A path that is not
    under ``start`` stays as given (a profile name Snakemake looks up in its config
    directories), unless it exists relative to the current directory: then the command line
    did not start in ``start``, and None."""
    def absolute(value: str) -> str | None:
        if os.path.isabs(value) or value == "none":
            return value
        there = os.path.join(start, value)
        if os.path.exists(there):
            return there
        return None if os.path.exists(value) else value

    argv = list(argv)
    end = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:end], argv[end:]
    named = {a.partition("=")[0] for a in head}
    if "--profile" not in named and environ.get("SNAKEMAKE_PROFILE"):
        head += ["--profile", environ["SNAKEMAKE_PROFILE"]]
    if not named & {"--snakefile", "-s"}:
        found = [c for c in snakemake_adapter.snakefile_choices() if os.path.isfile(os.path.join(start, c))]
        head += ["--snakefile", str(found[0])] if found else []
    out: list[str] = []
    i = 0
    while i < len(head):
        name, eq, value = head[i].partition("=")
        if name in PATH_OPTIONS and (eq or i + 1 < len(head)):
            path = absolute(value if eq else head[i + 1])
            if path is None:
                return None
            out += [f"{name}={path}"] if eq else [name, path]
            i += 1 if eq else 2
            continue
        out.append(head[i])
        i += 1
    return out + tail


def snakemake_args(argv: Sequence[str], starts: Sequence[str | None]) -> Any:
    """The command line ``argv`` (``sys.argv[1:]`` of a ``snakemake`` run) read as
    Snakemake reads it: by its own parser (``snakemake.cli.parse_args``, the profiles
    applied), which is also what Snakemake makes the executor plugin's settings from.
    Relative paths in it (a profile) are relative to the directory Snakemake started in,
    which ``--directory`` left: the first of ``starts`` (e.g. the shell's $PWD, then the
    current directory) from which the command line reads (``started_argv``: made
    absolute, the current directory never changed). None where it does not read (a
    command line that is not Snakemake's). Call it while the workflow is parsed: it
    redirects sys.stdout and sys.stderr for a moment."""
    for start in dict.fromkeys(s for s in starts if s and os.path.isdir(s)):
        absolute = started_argv(argv, start)
        if absolute is None:
            continue
        sink = io.StringIO()  # parse_args says again which profiles it uses
        try:
            with contextlib.redirect_stderr(sink), contextlib.redirect_stdout(sink):
                return snakemake_adapter.parse_args(absolute)
        except (SystemExit, Exception):  # informational: never stops the workflow
            continue
    return None


def plugin_settings(args: Any) -> Any:
    """The Slurm plugin's settings (its ExecutorSettings: ``--slurm-qos``,
    ``--slurm-requeue``, ``--slurm-reservation`` ...) of a command line read by
    ``snakemake_args``, made by the plugin's own registry entry as Snakemake makes them
    (``ExecutorPluginRegistry().get_plugin("slurm").get_settings(args)``); None without
    a command line, or for another executor."""
    if args is None or getattr(args, "executor", None) != "slurm":
        return None
    try:
        return snakemake_adapter.executor_settings(args, "slurm")
    except Exception:  # a setting the plugin refuses: Snakemake itself says so
        return None


def profile_problem(args: Any, site: Mapping[str, Any],
                    environ: Mapping[str, str] = os.environ) -> str | None:
    """Why the profile of the command line ``args`` (``snakemake_args``) does not fit
    ``site``, or None: a Slurm site without a Slurm profile (its points would be
    submitted without their geometry, or run here side by side), a Slurm account taken
    from a variable that is unset, a Slurm profile on a site without Slurm. None also
    where there is nothing to check: no command line (not Snakemake's, or inside a Slurm
    job, checked where it was submitted), or a command that runs no job (``NO_JOBS``)."""
    if args is None or any(getattr(args, name, None) for name in NO_JOBS):
        return None
    resources = snakemake_adapter.default_resources(args)  # the profile's, as given
    account = resources.get("slurm_account")
    partition = resources.get("slurm_partition")
    slurm_site = site["scheduler"] == "slurm"
    if slurm_site and account is None and partition is None:
        return (
            f"site {site['name']!r} is a Slurm site (scheduler: slurm): its points are Slurm "
            "jobs of their own geometry, submitted by its Slurm profile (e.g. --profile "
            "profiles/frontier, profiles/odo, profiles/local-slurm). Without one they would "
            "run here, side by side; use the profile, or a site without scheduler")
    if slurm_site:
        return account_problem(account, environ)
    if account is None and partition is None:
        return None
    return (
        f"a Slurm profile (its default-resources name slurm_partition or slurm_account) "
        f"with site {site['name']!r}, whose scheduler is {site['scheduler']!r}: its points "
        "declare no Slurm geometry and would be submitted as 1-core jobs. Name a Slurm "
        "site in the config (`site: frontier`, odo or local-slurm: profiles/frontier, "
        "profiles/odo and profiles/local-slurm name theirs) or run without the Slurm profile")


class Invocation:
    """This run of the workflow (see the module): ``argv`` its command line (sys.argv[1:]),
    read once, while the workflow is parsed, never inside a Slurm job (``command_line``
    is None there, and where it does not read: the workflow run through snakemake.api),
    its relative paths from the directory Snakemake started in: the shell's $PWD, else
    the current one (which is never changed)."""

    def __init__(self, config: dict, site: Mapping[str, Any], runs_dir: str,
                 argv: Sequence[str], environ: Mapping[str, str] = os.environ):
        self.config = config
        self.site = site
        self.runs_dir = runs_dir
        self.environ = environ
        self.slurm_site = site["scheduler"] == "slurm"
        self.in_job = in_slurm_job(environ)
        self.command_line = None if self.in_job else snakemake_args(
            argv, [environ.get("PWD"), os.getcwd()])
        submission = self.command_line if self.slurm_site else None
        # the Slurm plugin's settings of it (--slurm-qos ...), as it submits with them
        self.settings = plugin_settings(submission)
        self.dry_run = bool(getattr(submission, "dryrun", False))
        # the modules a point job loads (rule run_point's envmodules) where this command
        # line deploys them (--sdm env-modules, Frontier's profile): shown before its srun
        self.modules = (point_modules(site) if submission is not None
                        and snakemake_adapter.env_modules_deployed(submission) else [])
        self.refused: list[str] = []  # what the workflow refused while planning
        # the run_point jobs a dry run lists: point path -> (point, nodes, runtime)
        self.listed: dict[str, tuple] = {}
        # (workload, runtime, geometry) -> srun line with POINT_SLOT: every repeat of a
        # geometry shares it, but for its directory
        self._srun: dict[tuple, str] = {}

    def problem(self) -> str | None:
        """``profile_problem`` of this command line."""
        return profile_problem(self.command_line, self.site, self.environ)

    def refusal(self, message: str) -> str:
        """Records ``message`` as refused while planning (the workflow raises it: Snakemake
        stops, and a dry run then ends with no summary of its jobs)."""
        self.refused.append(message)
        return message

    def summarise_dry_run_at_exit(self) -> None:
        """On a Slurm site's dry run: ``print_dry_run_summary`` when the process ends."""
        if self.dry_run:
            atexit.register(self.print_dry_run_summary)

    def print_dry_run_summary(self) -> None:
        """The end of a dry run (campaign.dry_run.print_dry_run_summary, one line where
        it cannot be made); nothing where no run_point job was listed, or this run refused
        one (Snakemake stopped)."""
        if self.listed and not self.refused:
            from scalesweep.campaign.dry_run import print_dry_run_summary

            print_dry_run_summary(self.listed, self.config, self.settings)

    def launch_comment(self, point: Any, workload: dict, resources: Any) -> str:
        """On a Slurm site, outside a Slurm job, the comment (see the module), one line
        whatever a path holds; "" elsewhere (inside the job the params are evaluated
        again, and nothing prints them)."""
        if not self.slurm_site or self.in_job:
            return ""
        key = (point.workload, point.runtime, point.nodes, point.gpus, point.ranks,
               point.threads)
        srun = self._srun.get(key)
        if srun is None:
            try:
                srun = srun_template(point, workload, self.config, self.runs_dir)
            except Exception as exc:  # informational: never stops a submission
                srun = f"(launch line not shown: {type(exc).__name__}: {exc})"
            self._srun[key] = srun
        if self.dry_run:
            self.listed[point.path] = (point, resources.get("nodes"), resources.get("runtime"))
        unknown = "" if self.settings is not None else " [the plugin's --slurm-* options: unknown]"
        srun = srun.replace(POINT_SLOT, point.path)
        if self.modules:
            srun = snakemake_adapter.env_modules_shellcmd(self.modules, srun)
        comment = f"  # sbatch {sbatch_options(resources, settings=self.settings)}{unknown} ; {srun}"
        return comment.replace("\n", " ").replace("\r", " ")
