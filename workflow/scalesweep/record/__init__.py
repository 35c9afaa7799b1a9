"""What a run leaves on disk: the metrics.json schema and its writer (``metrics``), each
kind's figures declared once (``measures``), what each column of runs.csv is (``columns``), a point's geometry and how its directory spells it
(``geometry``), a point's directory and its file names (``pointdir``),
failure.json and the attempts (``failures``), the dataset manifests (``dataset``), the
user's name in paths (``hostenv``), the software stack a process ran (``stack``) and an LLM
point's load: arrival times, latency percentiles with their intervals, early stopping,
targets and goodput (``load``), and the ports a run's processes listen on (``ports``). The
bottom layer: it imports the standard library and
its own modules only, because the payloads import it inside containers
(``PYTHONPATH=<repo>/workflow``) where nothing else is installed; this file imports nothing.
"""
