"""A GGUF model's context length, read from the file's header (standard library only:
the workflow reads it too, before any job)."""

from __future__ import annotations

import os

# GGUF metadata value types (gguf.GGUFValueType) -> the size of a scalar; 8: string, 9: array
_GGUF_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_INT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}


def gguf_context_length(path: str | os.PathLike) -> int | None:
    """The context length a GGUF model declares (``<architecture>.context_length``), read
    from its header only (the keys come before the tensors: cheap for a 100 GB file); None
    when the file is not a readable GGUF (v2 or v3) or does not say."""
    import struct

    def read(fh, n: int) -> bytes:
        data = fh.read(n)
        if len(data) != n:
            raise EOFError
        return data

    def string(fh) -> bytes:
        return read(fh, struct.unpack("<Q", read(fh, 8))[0])

    def skip(fh, kind: int) -> None:
        if kind in _GGUF_SCALAR:
            fh.seek(_GGUF_SCALAR[kind], 1)
        elif kind == 8:
            fh.seek(struct.unpack("<Q", read(fh, 8))[0], 1)
        elif kind == 9:
            item, n = struct.unpack("<IQ", read(fh, 12))
            if item in _GGUF_SCALAR:
                fh.seek(_GGUF_SCALAR[item] * n, 1)
            else:
                for _ in range(n):
                    skip(fh, item)
        else:
            raise ValueError(f"GGUF value type {kind}")

    arch, lengths = None, {}
    try:
        with open(path, "rb") as fh:
            magic, version = struct.unpack("<4sI", read(fh, 8))
            if magic != b"GGUF" or version not in (2, 3):
                return None
            _, n_kv = struct.unpack("<QQ", read(fh, 16))
            for _ in range(n_kv):
                key = string(fh).decode("utf-8", "replace")
                kind = struct.unpack("<I", read(fh, 4))[0]
                if key == "general.architecture" and kind == 8:
                    arch = string(fh).decode("utf-8", "replace")
                elif key.endswith(".context_length") and kind in _GGUF_INT:
                    lengths[key] = struct.unpack(_GGUF_INT[kind], read(fh, _GGUF_SCALAR[kind]))[0]
                else:
                    skip(fh, kind)
                if arch and f"{arch}.context_length" in lengths:
                    break
    except (OSError, EOFError, ValueError, struct.error):
        return None
    n = lengths.get(f"{arch}.context_length") if arch else None
    return int(n) if n and n > 0 else None
