"""A made-up runtime, "toybox", as one module: what a new file in
``workflow/scalesweep/platform/runtimes/`` would hold. tests/unit/test_toy_runtime.py imports it
(registering the class) and shows the launcher and the image build use it unchanged."""

from __future__ import annotations

from scalesweep.platform.runtimes import BuildSteps, Runtime, register


@register
class Toybox(Runtime):
    """Runs an image directory with ``toybox enter``; builds a Dockerfile with
    ``toybox build`` from the offline base it imports first."""

    name = "toybox"
    site_key = "toybox"
    default_bin = "toybox"
    install_hint = "there is no toybox: it is a test's"
    recipe_kind = "dockerfile"
    image_formats = ("dir",)
    build_tools = ("toybox",)

    def exec_prefix(self, site, binds, workdir):
        return [self.executable(site), "enter", *(f"-m{s}={d}" for s, d in binds),
                f"--cwd={workdir}", self.image_reference(site.image), "--"]

    def exec_command(self, image, argv, bin=""):
        return [bin or self.default_bin, "enter", str(image), "--", *argv]

    def host_env(self, site):
        return {f"TOYBOX_{k}": v for k, v in self.container_env(site)}

    def dockerfile_steps(self, req):
        toybox = req.tools[self.default_bin]
        args = [f"--arg={k}={v}" for k, v in req.build_args.items()]
        binds = [f"--mount={src}:{dst}" for src, dst in req.binds.items()]
        return BuildSteps(
            commands=[[toybox, "import", req.base_tarball, req.base_name],
                      [toybox, "build", *binds, *args, "-f", req.recipe, "-o", req.product, req.context]],
            built=req.product,
            inventory=self.exec_command(req.product, [], bin=toybox),
            clean_env=False,
            facts={"toybox": True},
        )
