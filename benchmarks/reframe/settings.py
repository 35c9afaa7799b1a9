# ReFrame site configuration for benchmarks/peer_reframe.py: this machine, one partition,
# the local scheduler (no Slurm), mpirun for several ranks, one job at a time (as
# scalesweep's profiles/local: measure=1, so points never share cores).
site_configuration = {
    "systems": [
        {
            "name": "scalesweep-local",
            "descr": "the machine the scalesweep benchmarks run on",
            "hostnames": [".*"],
            "modules_system": "nomod",
            "partitions": [
                {
                    "name": "default",
                    "descr": "local processes",
                    "scheduler": "local",
                    "launcher": "mpirun",
                    "environs": ["builtin"],
                    "max_jobs": 1,
                }
            ],
        }
    ],
    "environments": [{"name": "builtin", "cc": "cc", "cxx": "", "ftn": ""}],
}
