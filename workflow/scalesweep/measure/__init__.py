"""Samplers and probes that run beside a payload: the interference monitor, the memory
timeline, the machine-speed probe, and what Slurm says about the job a point runs in. May
import the standard library and ``scalesweep.record``; nothing above it.
"""
