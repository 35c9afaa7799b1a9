"""Load levels of the LLM payload (scripts/infer_llm.py): how an inference server is sized.

After the warm-up, one point measures, against the same warmed-up server:

* **closed loop** at each concurrency level (``--concurrency-levels``): C requests in
  flight, the next sent when one ends (the prompt set of the point's headline figures);
* **open loop** at each request rate (``--request-rates``): requests sent at the arrival
  times of ``scalesweep.record.load.arrival_times`` (Poisson, gamma with a burstiness, or
  constant; a recorded seed), whether or not earlier ones have finished, as vLLM's
  ``bench serve`` and MLPerf LoadGen's Server scenario do; ``--max-in-flight`` caps the
  requests outstanding (0: none), a request over the cap waits and its wait counts in
  its latency (it arrived when scheduled);
* **offline** (``--offline``): every request at once, throughput only (MLPerf's Offline);
* **the highest rate within the target** (``--max-rate-steps``): a bisection between the
  highest configured rate that met ``--target`` and the lowest that did not.

Every level's requests are the same on both sides of a comparison: the prompts in the
same order, the same arrival times (same seed), the same ``max_tokens``. Each request is
kept (``--requests-out``, JSON lines: its level, scheduled arrival, send, first token,
every token's time, end, tokens in and out, success); each level is summarised by
``scalesweep.record.load.level_summary`` (TTFT, TPOT, ITL and end-to-end percentiles with
confidence intervals, early-stopping estimates, goodput against the target).

Standard library only (plus the engine it is given); times are ``time.perf_counter``
seconds, written relative to each level's start.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

from scalesweep.record.load import arrival_times, level_summary, max_rate_bisect

# requests an offline level keeps in flight at most (one client thread each)
OFFLINE_IN_FLIGHT = 512
# the time of a request field relative to its level's start (seconds)
TIME_FIELDS = ("t_arrival", "t_send", "t_first", "t_end")


# the words generated prompts are made of (common English words: one token each, or
# nearly, for most tokenizers); a request records the engine's own count of its tokens
# (input_tokens, or prompt_text_tokens: request_record)
WORDS = ("the of and to in is was for on that with as by at from his her they which this "
         "one time data model node light water world system number part people year work "
         "day city point river music energy field table order paper story group").split()


def generated_prompts(n: int, input_words: tuple[int, int], output_tokens: tuple[int, int],
                      seed: int) -> list[dict[str, Any]]:
    """``n`` requests of generated lengths (uniform, inclusive ranges, seeded): a prompt of
    ``input_words`` words and its own ``max_tokens`` drawn from ``output_tokens`` (the
    same list for every runtime of a comparison)."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(*input_words)
        out.append({"prompt": " ".join(rng.choice(WORDS) for _ in range(k)),
                    "max_tokens": rng.randint(*output_tokens)})
    return out


def request_record(rec: dict[str, Any], t0: float, level: int,
                   counted: int | None = None) -> dict[str, Any]:
    """One request as ``scalesweep.record.load`` reads it (times from the level's start).

    Its input tokens, each named by what it counts: ``input_tokens``, the tokens the
    server says it evaluated (its usage' ``prompt_tokens``: the prompt as the chat
    template rendered it), None where the engine reports none (llama-cpp-python's stream);
    ``prompt_text_tokens``, where it reports none, ``counted``: the prompt text alone by
    the server's tokenizer (``Engine.count_tokens``), without the chat template (25 where
    the server evaluated 33 in the quickstart's campaign, issue 40)."""
    def rel(v):
        return None if v is None else round(v - t0, 6)

    reported = rec.get("prompt_tokens")
    return {
        "level": level,
        "index": rec.get("index"),
        "server": rec.get("server"),
        "ok": bool(rec.get("ok")),
        "error": rec.get("error"),
        **{k: rel(rec.get(k)) for k in TIME_FIELDS},
        "t_tokens": [rel(t) for t in rec.get("t_pieces") or []],
        "input_tokens": reported,
        "prompt_text_tokens": counted if reported is None else None,
        "output_tokens": rec.get("completion_tokens"),
        "token_source": rec.get("token_source"),
        "stream_pieces": rec.get("stream_pieces"),
    }


def _call(engine: Any, prompt: dict[str, Any], i: int) -> dict[str, Any]:
    try:
        rec = engine.generate(prompt, i)
    except Exception as exc:  # a bug, not an engine error: record it and go on
        rec = {"ok": False, "t_send": time.perf_counter(), "error": f"{type(exc).__name__}: {exc}"}
    rec["index"] = i
    return rec


def closed_loop(engine: Any, prompts: list[dict[str, Any]], concurrency: int
                ) -> tuple[list[dict[str, Any]], float, float]:
    """Every prompt through ``concurrency`` client threads (the next sent when one ends);
    each request's arrival is its send. Returns (records in prompt order, t0, t_end)."""
    nxt = iter(range(len(prompts)))
    lock = threading.Lock()
    results: list[dict[str, Any] | None] = [None] * len(prompts)

    def worker() -> None:
        while True:
            with lock:
                i = next(nxt, None)
            if i is None:
                return
            rec = _call(engine, prompts[i], i)
            rec["t_arrival"] = rec.get("t_send")
            results[i] = rec

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, daemon=True, name=f"client-{k}")
               for k in range(min(concurrency, len(prompts)))]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    return [r for r in results if r is not None], t0, time.perf_counter()


def open_loop(engine: Any, prompts: list[dict[str, Any]], arrivals: list[float],
              max_in_flight: int = 0) -> tuple[list[dict[str, Any]], float, float]:
    """Request i sent at ``t0 + arrivals[i]`` (one thread each), whatever is still in
    flight; with ``max_in_flight`` > 0 a request over the cap waits for a slot (its
    arrival stays the scheduled time). Returns (records in arrival order, t0, t_end)."""
    slots = threading.BoundedSemaphore(max_in_flight) if max_in_flight > 0 else None
    results: list[dict[str, Any] | None] = [None] * len(arrivals)

    def send(i: int, t_arrival: float) -> None:
        try:
            rec = _call(engine, prompts[i % len(prompts)], i)
        finally:
            if slots is not None:
                slots.release()
        rec["t_arrival"] = t_arrival
        results[i] = rec

    threads = []
    t0 = time.perf_counter()
    for i, at in enumerate(arrivals):
        due = t0 + at
        while (wait := due - time.perf_counter()) > 0:
            time.sleep(min(wait, 0.05))
        if slots is not None:
            slots.acquire()
        t = threading.Thread(target=send, args=(i, due), daemon=True, name=f"request-{i}")
        try:
            t.start()
        except RuntimeError as exc:  # the client's own limit, not the server's: say so
            raise ValueError(f"the client could not start request {i} of the level ({exc}, "
                             f"{sum(x.is_alive() for x in threads)} in flight): lower "
                             "load.requests or set load.max_in_flight") from None
        threads.append(t)
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    return [r for r in results if r is not None], t0, time.perf_counter()


class LoadRun:
    """The load levels of one point: each measured, kept and summarised in turn."""

    def __init__(self, engine: Any, prompts: list[dict[str, Any]], *,
                 open_prompts: list[dict[str, Any]] | None = None, target: dict | None,
                 requests_out: Path | None, arrival: str, burstiness: float, seed: int,
                 n_open: int, max_in_flight: int) -> None:
        self.engine, self.prompts, self.target = engine, prompts, target
        self.open_prompts = open_prompts or prompts  # the open-loop and offline requests
        self.arrival, self.burstiness, self.seed = arrival, burstiness, seed
        self.n_open, self.max_in_flight = n_open, max_in_flight
        self.levels: list[dict[str, Any]] = []
        self.records: list[tuple[list[dict[str, Any]], float, float]] = []
        self._counts: dict[str, int | None] = {}  # each level's raw records, with its window
        self.requests_out = requests_out
        if requests_out is not None:
            requests_out.parent.mkdir(parents=True, exist_ok=True)
            self._tmp = requests_out.with_name(f".{requests_out.name}.tmp")
            self._tmp.write_text("")

    def _counted(self, prompt: dict[str, Any]) -> int | None:
        """The prompt's input tokens counted by the engine, once per text (outside any
        level's window)."""
        text = prompt.get("prompt", "")
        if text not in self._counts:
            try:
                self._counts[text] = self.engine.count_tokens(prompt)
            except Exception:  # noqa: BLE001  (an engine without the endpoint: unknown)
                self._counts[text] = None
        return self._counts[text]

    def _keep(self, spec: dict[str, Any], records: list[dict[str, Any]], t0: float,
              t_end: float, prompts: list[dict[str, Any]]) -> dict[str, Any]:
        level = len(self.levels)
        requests = [request_record(r, t0, level,
                                   None if r.get("prompt_tokens") is not None or r.get("index") is None
                                   else self._counted(prompts[r["index"] % len(prompts)]))
                    for r in records]
        if self.requests_out is not None:
            with open(self._tmp, "a") as fh:
                for r in requests:
                    fh.write(json.dumps(r) + "\n")
        summary = level_summary(requests, t_end - t0, self.target)
        entry = {"level": level, **spec, **summary}
        self.levels.append(entry)
        self.records.append((records, t0, t_end))
        return entry

    def closed(self, concurrency: int, records=None, t0=None, t_end=None) -> dict[str, Any]:
        """A closed-loop level (``records``: the already measured headline run)."""
        if records is None:
            records, t0, t_end = closed_loop(self.engine, self.prompts, concurrency)
        for r in records:  # a closed loop's request arrives when it is sent
            r.setdefault("t_arrival", r.get("t_send"))
        return self._keep({"shape": "closed", "concurrency": concurrency}, records, t0, t_end,
                          self.prompts)

    def open(self, rate: float, bisection: bool = False) -> dict[str, Any]:
        arrivals = arrival_times(self.n_open, rate, self.arrival, self.burstiness, self.seed)
        records, t0, t_end = open_loop(self.engine, self.open_prompts, arrivals, self.max_in_flight)
        return self._keep({"shape": self.arrival, "rate": rate, "burstiness": self.burstiness,
                           "seed": self.seed, "max_in_flight": self.max_in_flight,
                           "bisection": bisection}, records, t0, t_end, self.open_prompts)

    def offline(self) -> dict[str, Any]:
        n = self.n_open
        # every request at once, up to OFFLINE_IN_FLIGHT client threads (the rest queue in
        # the client, and their wait counts in their latency)
        cap = min(n, self.max_in_flight or OFFLINE_IN_FLIGHT)
        records, t0, t_end = open_loop(self.engine, self.open_prompts, [0.0] * n, cap)
        return self._keep({"shape": "offline", "max_in_flight": cap}, records, t0, t_end,
                          self.open_prompts)

    def max_rate(self, steps: int, tolerance: float) -> dict[str, Any] | None:
        """The highest rate within the target: a bisection between the highest measured
        open-loop rate that met it and the lowest that did not (None without a target)."""
        if self.target is None:
            return None
        # a level "meets" the target unless its sample percentile is over a limit
        # (meets_target False); one too short for LoadGen's early stopping to confirm it
        # (None) counts as meeting it, and the result says on what basis
        measured = {lv["rate"]: lv.get("meets_target") is not False
                    for lv in self.levels if lv.get("rate") is not None}
        unconfirmed = sorted(lv["rate"] for lv in self.levels
                             if lv.get("rate") is not None and lv.get("meets_target") is None)
        failing = sorted(r for r, ok in measured.items() if not ok)
        if not failing:
            top = max(measured, default=None)
            return {"max_rate_rps": top, "bound": "at least" if top else "none",
                    "note": f"every measured rate met the target: the highest rate within it is "
                            f"at least {top:g} requests/s" if top else "no open-loop rate measured",
                    "tried": []}
        # the bracket: the lowest rate that missed, and the highest below it that met
        high = failing[0]
        below = [r for r, ok in measured.items() if ok and r < high]
        above = sorted(r for r, ok in measured.items() if ok and r > high)
        odd = (f"; not monotone: {', '.join(f'{r:g}' for r in above)} requests/s met the target "
               f"above {high:g}, which missed (a short level's percentiles vary)" if above else "")
        if not below:
            return {"max_rate_rps": None, "bound": "none", "missed_rps": high, "tried": [],
                    "note": f"the lowest measured rate, {high:g} requests/s, missed the target{odd}"}
        low = max(below)

        def meets(rate: float) -> bool:
            level = self.open(rate, bisection=True)
            if level.get("meets_target") is None:
                unconfirmed.append(rate)
            return level.get("meets_target") is not False

        found = max_rate_bisect(meets, low, high, steps=steps, tolerance=tolerance, low_known=True)
        note = (f"at {', '.join(f'{r:.3g}' for r in sorted(set(unconfirmed)))} requests/s the sample "
                "percentiles met the target but the run was too short for early stopping to "
                "confirm it" if unconfirmed else "") + odd
        note = note.removeprefix("; ") or None
        return {"max_rate_rps": found["max_rate"], "bound": "bisection",
                # the lowest rate that missed the target: the result's resolution
                "missed_rps": found["bracket"][1],
                "between": [low, high], "tried": found["tried"], "note": note,
                "basis": "sample percentiles" if unconfirmed else "early stopping"}

    def finish(self) -> None:
        if self.requests_out is not None:
            os.replace(self._tmp, self.requests_out)


def run_load(args: Any, engine: Any, prompts: list[dict[str, Any]], record: dict[str, Any],
             headline: tuple[list[dict[str, Any]], float, float],
             target: dict | None, log: Callable[[str], None]) -> LoadRun:
    """Every load level of the point into ``record["load_levels"]`` (and the highest
    rate within the target into ``record["max_rate"]``); the run, whose ``records`` hold
    each level's raw records."""
    levels = [int(x) for x in args.concurrency_levels.split(",") if x.strip()] or [args.concurrency]
    rates = [float(x) for x in args.request_rates.split(",") if x.strip()]
    record["client"] = client_placement(engine, args.client_placement)
    if args.input_words or args.output_tokens:  # generated lengths for the open-loop levels
        n = args.load_requests or len(prompts)
        open_prompts = generated_prompts(n, _range(args.input_words or "8:8"),
                                         _range(args.output_tokens or f"{args.max_tokens}:{args.max_tokens}"),
                                         args.arrival_seed)
    else:
        open_prompts = prompts
    run = LoadRun(engine, prompts, open_prompts=open_prompts, target=target,
                  requests_out=Path(args.requests_out) if args.requests_out else None,
                  arrival=args.arrival, burstiness=args.burstiness, seed=args.arrival_seed,
                  n_open=args.load_requests or len(prompts), max_in_flight=args.max_in_flight)
    try:
        run.closed(levels[0], *headline)
        for c in levels[1:]:
            run.closed(c)
        for rate in rates:
            lv = run.open(rate)
            verdict = {True: "met", False: "missed", None: "met by the sample, unconfirmed"}
            log(f"open loop at {rate:g} requests/s: {lv['n_ok']} of {lv['n']} ok, "
                f"TTFT p99 {_ms(lv, 'ttft')}, TPOT p99 {_ms(lv, 'tpot')}"
                + (f", target {verdict[lv.get('meets_target')]}" if target else ""))
        if args.offline:
            run.offline()
        if rates and target is not None and args.max_rate_steps:
            record["max_rate"] = run.max_rate(args.max_rate_steps, args.max_rate_tolerance)
    finally:
        run.finish()
        record["load_levels"] = run.levels
        record["load"] = {"arrival": args.arrival, "burstiness": args.burstiness,
                          "seed": args.arrival_seed, "requests_per_level": run.n_open,
                          "max_in_flight": args.max_in_flight, "target": target,
                          "input_words": args.input_words, "output_tokens": args.output_tokens,
                          "requests_file": args.requests_out}
    return run


def client_placement(engine: Any, requested: str = "with_server") -> dict[str, Any]:
    """Where the client ran relative to the server (``requested``: the workload's
    ``load.client``): this process (the payload: inside the container on a container run,
    or with ``host`` a native process beside the containerised server), by the network
    namespaces of the two where both are seen here (a client outside the server's
    namespace pays the bridge on every request: ~2 ms in ai-dynamo/aiperf PR #850)."""
    def netns(pid: int | str) -> str | None:
        try:
            return os.readlink(f"/proc/{pid}/ns/net")
        except OSError:
            return None

    pid = getattr(engine, "pid", None)
    mine = netns("self")
    theirs = netns(pid) if pid and pid != os.getpid() else mine
    servers = getattr(engine, "bases", None) or []
    where = {"with_server": "the payload's process, where the server runs (in its container "
                            "on a container run)",
             "host": "a native process on the server's node, outside the server's container"}
    return {
        "placement": requested,
        "where": where.get(requested, requested) if pid or requested == "host" else
                 "the payload's process on the first node; a server on every node",
        "servers": list(servers),
        "client_netns": mine,
        "server_netns": theirs if pid else None,
        "same_network_namespace": (mine == theirs) if pid and mine and theirs else None,
    }


def _range(text: str) -> tuple[int, int]:
    """``LO:HI`` (or one number) as an inclusive range of positive integers."""
    lo, _, hi = text.partition(":")
    low, high = int(lo), int(hi or lo)
    if not 1 <= low <= high:
        raise ValueError(f"{text!r} is not a range LO:HI of positive integers")
    return low, high


def _ms(level: dict[str, Any], metric: str) -> str:
    p99 = ((level.get(metric) or {}).get("p99") or {}).get("estimate")
    return "n/a" if p99 is None else f"{p99 * 1e3:.0f} ms"
