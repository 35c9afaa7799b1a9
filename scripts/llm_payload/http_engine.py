"""The base of an LLM engine that runs as an HTTP server (``llamacpp``, ``ollama``):
started here, or already running elsewhere (``--servers``)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import Any, ClassVar

from llm_payload.engine import Engine, Setup
from llm_payload.errors import PointError
from llm_payload.http_client import parse_servers, request_body, stream_request
from llm_payload.server import free_port, start_server, stop_server, wait_healthy


class HttpEngine(Engine):
    """An engine that runs as an HTTP server: started here, or already running
    elsewhere (``--servers``: requests spread round-robin over them)."""

    serves_http = True
    health_path: ClassVar[str] = ""

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.env = dict(os.environ, **setup.gpu_env)
        self.proc: subprocess.Popen | None = None
        self.bases: list[str] = []
        self.address = ""  # host:port of the server started here, as clients reach it
        self._t_start = 0.0

    def server_command(self, host: str, port: int, host_for_url: str) -> list[str]:
        raise NotImplementedError

    def after_ready(self) -> None:
        """Once a server started here is healthy (e.g. register the model)."""

    def start(self) -> None:
        a = self.args
        if a.servers:
            self.bases = parse_servers(a.servers)
            self.record["servers"] = self.bases
            self.replicas = len(self.bases)
            return
        port = a.port or free_port(a.host)
        host_for_url = f"[{a.host}]" if ":" in a.host else a.host
        self.bases = [f"http://{host_for_url}:{port}"]
        advertised = socket.gethostname() if a.host in ("0.0.0.0", "::", "") else host_for_url
        self.address = f"{advertised}:{port}"
        cmd = self.server_command(a.host, port, host_for_url)
        self.record["engine"]["server_cmd"] = cmd
        self.record["servers"] = self.bases
        self._t_start = time.perf_counter()
        try:
            self.proc = start_server(cmd, self.env, self.setup.log_path)
        except OSError as exc:
            raise PointError(f"cannot start {cmd[0]}: {exc}") from exc
        self.record["server_pid"] = self.pid = self.proc.pid

    def wait_ready(self) -> float | None:
        a = self.args
        if self.proc is None:
            for b in self.bases:
                wait_healthy(b, self.health_path, None, a.startup_timeout, None)
            return None
        wait_healthy(self.bases[0], self.health_path, self.proc, a.startup_timeout, self.setup.log_path)
        seconds = time.perf_counter() - self._t_start
        self.after_ready()
        return seconds

    def generate(self, prompt: dict[str, Any], index: int = 0) -> dict[str, Any]:
        a = self.args
        # a request may carry its own output length (generated lengths: scripts/llm_load.py)
        body = request_body(a.api, self.model_name, prompt, prompt.get("max_tokens") or a.max_tokens,
                            a.seed, self.setup.threads)
        return stream_request(self.bases[index % len(self.bases)], a.api, body, a.request_timeout)

    def poll(self) -> int | None:
        """None while the server started here runs, else its exit status."""
        return self.proc.poll() if self.proc is not None else None

    def stop(self) -> int | None:
        return stop_server(self.proc)
