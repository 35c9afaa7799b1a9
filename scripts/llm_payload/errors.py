"""The error that fails an LLM point."""


class PointError(RuntimeError):
    """The point failed (server did not start, requests failed, ...)."""
