"""Where and how things run: the sites (a machine as data), the container runtimes (one
class each), the host-MPI injection and the launch line (launcher x runtime x payload).
May import ``scalesweep.record`` and ``scalesweep.measure``; nothing above it.
"""
