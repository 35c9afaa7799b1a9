"""The LLM payload's library: ``scripts/infer_llm.py`` (the driver) and
``scripts/llm_engines.py`` (the engines) are made of it; it is imported with ``scripts/``
on ``sys.path`` (an entry point's own folder, natively and at /mnt/code in a container).

The engines' parts:

* ``engine``: the engine interface (``Engine``, ``Setup``), ``DEFAULT_CTX``, and the
  registry the engines of ``llm_engines.py`` join (``register``, ``ENGINES``);
* ``http_engine``: the base of an engine that runs as an HTTP server;
* ``stream``: one streamed generation, timed (``TokenStream``); ``sse``: the streamed
  wire formats (server-sent events, NDJSON) as events; ``http_client``: requests to a
  server; ``server``: a server process (start, health, stop, why it died, from its log);
* ``gguf_header``: a GGUF file's context length, from its header; ``ollama``: a GGUF
  registered with Ollama; ``errors``: ``PointError``.

The driver's steps: ``cli`` (the options and their checks), ``gpus`` (device visibility),
``point`` (the metrics record, the engine started and always stopped), ``prompts`` (the
prompt set, sent ``--concurrency`` at a time), ``memory`` (the engine's process tree
sampled), ``model_info`` (the model's card and digest), ``client`` (the timed prompt set,
the load levels of ``llm_load.py``, ``--serve-only``), ``stats`` (percentiles),
``signals`` (SIGTERM and SIGHUP end a point cleanly). And ``bpe_tokenizer``: the
tokenizer ``make_synthetic_llm.py`` trains for the synthetic model.

Standard library only at import, like every payload module, beside ``scalesweep.record``
(the metrics writer and the load statistics, standard library only too): an engine
imports more when it starts (torch), the tokenizer when it trains (tokenizers).
"""
