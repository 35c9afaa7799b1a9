"""Image builds: ``scalesweep build-image`` and ``describe-image`` (the recipes, the
content digest, the provenance record). May import ``record``, ``measure``, ``platform``
and ``plan``; nothing above it.
"""
