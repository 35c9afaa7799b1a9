"""The CNN payload's library: ``scripts/train_cnn.py`` is made of it; it is imported with
``scripts/`` on ``sys.path`` (the entry point's own folder, natively and at /mnt/code in
a container).

* ``ranks``: this process's rank, world size and local rank (the launcher's, or MPI's);
* ``parallel``: how the ranks train together (``--parallel``): the process group, the
  model wrapped, the MPI gradient average, the collectives, the per-rank records gathered;
* ``data``: the image folder, decoded into memory or read batch by batch, and the
  held-out split;
* ``model``: the network, its arithmetic (``--precision``), its FLOPs, its evaluation;
* ``loop``: the timed epochs;
* ``record``: each rank's record, and the metrics record rank 0 writes.

torch (and numpy, PIL, mpi4py) are imported inside the functions that use them, never at
import: ``--help`` and the workflow's checks (``train_cnn.MIN_IMAGE_SIZE``) need none of
them, and with ``--parallel mpi`` MPI is initialised before torch loads.
"""
