"""ctypes access to the C engine (libgs_engine.so of a host build), for the pytest suite.

    engine = Engine(build.engine_lib)
    model = engine.open(artifact_bytes)          # gs_open + an aligned arena + gs_attach_arena
    logits = model.forward(token)                # numpy float32 (V,), a copy
    tok = model.sample(logits, 0.8, 40, rng)     # rng = engine.rng(seed)
    y = engine.exp(x); y = engine.tanh(x)        # the engine's own exp and tanh, elementwise
    ids = model.encode(b"ROMEO:")
    dec = model.decoder(); dec.push(tok); dec.flush()

Every engine call's gs_status is checked: a non-zero status raises GsError carrying its name
(`GsError.status == "GS_ERR_TOKEN"`). The Python objects own the memory the engine works in: the
artifact bytes, the model struct and the arena stay alive as long as the Model.
"""

from __future__ import annotations

import ctypes
from ctypes import POINTER, c_char_p, c_float, c_size_t, c_uint8, c_uint32, c_uint64, c_void_p
from pathlib import Path

import numpy as np

# gs_slide_fn: void (*)(void *ctx, uint32_t done, uint32_t total)
SLIDE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_uint32, c_uint32)
HEADER_FIELDS = (
    "file_bytes",
    "vocab_size",
    "block_size",
    "n_layer",
    "n_head",
    "n_embd",
    "head_size",
    "flags",
    "arena_bytes",
    "bos_token",
)
CONFIG_FIELDS = (
    "vocab_size",
    "block_size",
    "n_layer",
    "n_head",
    "n_embd",
    "head_size",
    "flags",
    "arena_bytes",
    "bos_token",
    "n_tokens",
    "kind",
    "pattern",
    "n_pairs",
    "n_special",
)


class GsError(Exception):
    """A gs_status other than GS_OK."""

    def __init__(self, status: str, call: str) -> None:
        super().__init__(f"{call} returned {status}")
        self.status = status


def _aligned(n: int, align: int = 16) -> tuple[ctypes.Array, int]:
    """A ctypes buffer of at least n bytes and the address of its first `align`-aligned byte."""
    buf = ctypes.create_string_buffer(n + align)
    addr = ctypes.addressof(buf)
    return buf, addr + (-addr) % align


class Engine:
    """The shared library with argument types declared."""

    def __init__(self, path: str | Path) -> None:
        lib = self.lib = ctypes.CDLL(str(path))
        u32p, f32p = POINTER(c_uint32), POINTER(c_float)
        sigs = {
            "gs_status_name": (c_char_p, [ctypes.c_int]),
            "gs_open": (ctypes.c_int, [c_void_p, c_void_p, c_size_t]),
            "gs_attach_arena": (ctypes.c_int, [c_void_p, c_void_p, c_size_t]),
            "gs_reset": (ctypes.c_int, [c_void_p]),
            "gs_forward": (ctypes.c_int, [c_void_p, c_uint32, POINTER(f32p)]),
            "gs_sample": (ctypes.c_int, [c_void_p, f32p, c_float, c_uint32, c_void_p, u32p]),
            "gs_rng_seed": (None, [c_void_p, c_uint64]),
            "gs_rng_next": (c_uint32, [c_void_p]),
            "gs_rng_uniform": (c_float, [c_void_p]),
            "gs_encode": (
                ctypes.c_int,
                [c_void_p, c_void_p, c_size_t, u32p, c_size_t, POINTER(c_size_t)],
            ),
            "gs_decoder_init": (None, [c_void_p]),
            "gs_decode": (
                ctypes.c_int,
                [c_void_p, c_void_p, c_uint32, POINTER(c_uint8), c_size_t, POINTER(c_size_t)],
            ),
            "gs_decode_flush": (
                ctypes.c_int,
                [c_void_p, POINTER(c_uint8), c_size_t, POINTER(c_size_t)],
            ),
            "gs_token_bytes": (
                ctypes.c_int,
                [c_void_p, c_uint32, POINTER(POINTER(c_uint8)), POINTER(c_size_t)],
            ),
            "gs_crc32": (c_uint32, [c_void_p, c_size_t]),
            "gs_capi_model_bytes": (c_size_t, []),
            "gs_capi_decoder_bytes": (c_size_t, []),
            "gs_capi_rng_bytes": (c_size_t, []),
            "gs_capi_config": (c_size_t, [c_void_p, u32p, c_size_t]),
            "gs_capi_layernorm_eps": (c_float, [c_void_p]),
            "gs_capi_pos": (c_uint32, [c_void_p]),
            "gs_capi_window": (c_uint32, [c_void_p, u32p]),
            "gs_capi_arena_formula": (c_uint64, [c_uint32, c_uint32, c_uint32, c_uint32]),
            "gs_capi_slide_tile_formula": (c_uint32, [c_uint32, c_uint32]),
            "gs_capi_weight_bytes": (c_uint64, [c_void_p]),
            "gs_capi_peek_header": (ctypes.c_int, [c_void_p, c_size_t, u32p]),
            "gs_peek_header": (ctypes.c_int, [c_void_p, c_size_t, u32p, c_void_p]),
            "gs_on_slide": (None, [c_void_p, SLIDE_FN, c_void_p]),
            "gs_capi_exp": (None, [f32p, f32p, c_size_t]),
            "gs_capi_tanh": (None, [f32p, f32p, c_size_t]),
        }
        for name, (restype, argtypes) in sigs.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = restype, argtypes

    def status_name(self, status: int) -> str:
        return self.lib.gs_status_name(status).decode()

    def check(self, status: int, call: str) -> None:
        if status != 0:
            raise GsError(self.status_name(status), call)

    def open_status(self, data: bytes) -> str:
        """gs_open's status name for these bytes (the model is thrown away)."""
        model = ctypes.create_string_buffer(self.lib.gs_capi_model_bytes())
        buf = ctypes.create_string_buffer(bytes(data), len(data)) if data else None
        addr = ctypes.addressof(buf) if buf is not None else 1  # any non-NULL pointer for 0 bytes
        return self.status_name(self.lib.gs_open(model, addr, len(data)))

    def open(self, data: bytes, *, arena_bytes: int | None = None) -> Model:
        """gs_open the artifact and attach an arena of arena_bytes (default: what it asks)."""
        return Model(self, data, arena_bytes)

    def rng(self, seed: int) -> Rng:
        return Rng(self, seed)

    def crc32(self, data: bytes) -> int:
        return int(self.lib.gs_crc32(data, len(data)))

    def arena_formula(self, V: int, T: int, L: int, C: int) -> int:
        return int(self.lib.gs_capi_arena_formula(V, T, L, C))

    def slide_tile_formula(self, T: int, L: int) -> int:
        return int(self.lib.gs_capi_slide_tile_formula(T, L))

    def peek_header(self, data: bytes) -> dict[str, int]:
        """gs_peek_header of these bytes: the header fields it returns (GsError otherwise)."""
        out = (c_uint32 * len(HEADER_FIELDS))()
        self.check(self.lib.gs_capi_peek_header(data, len(data), out), "gs_peek_header")
        return dict(zip(HEADER_FIELDS, list(out)))

    def _elementwise(self, name: str, x: np.ndarray) -> np.ndarray:
        src = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty_like(src)
        f32p = POINTER(c_float)
        getattr(self.lib, name)(src.ctypes.data_as(f32p), out.ctypes.data_as(f32p), src.size)
        return out

    def exp(self, x: np.ndarray) -> np.ndarray:
        """The engine's own gs_exp (FORMAT.md section 7) over an array."""
        return self._elementwise("gs_capi_exp", x)

    def tanh(self, x: np.ndarray) -> np.ndarray:
        """The engine's own gs_tanh over an array."""
        return self._elementwise("gs_capi_tanh", x)


class Rng:
    """A gs_rng (PCG32) seeded with gs_rng_seed."""

    def __init__(self, engine: Engine, seed: int) -> None:
        self.engine = engine
        self.buf = ctypes.create_string_buffer(engine.lib.gs_capi_rng_bytes())
        engine.lib.gs_rng_seed(self.buf, seed)

    def next_u32(self) -> int:
        return int(self.engine.lib.gs_rng_next(self.buf))

    def uniform(self) -> np.float32:
        return np.float32(self.engine.lib.gs_rng_uniform(self.buf))


class Model:
    """An opened artifact with its arena (see the module docstring)."""

    def __init__(self, engine: Engine, data: bytes, arena_bytes: int | None) -> None:
        lib = self.lib = engine.lib
        self.engine = engine
        self.data = ctypes.create_string_buffer(bytes(data), len(data))  # kept alive: read in place
        self.struct = ctypes.create_string_buffer(lib.gs_capi_model_bytes())
        engine.check(lib.gs_open(self.struct, self.data, len(data)), "gs_open")
        fields = (c_uint32 * len(CONFIG_FIELDS))()
        lib.gs_capi_config(self.struct, fields, len(CONFIG_FIELDS))
        self.config = dict(zip(CONFIG_FIELDS, list(fields)))
        self.config["layernorm_eps"] = float(lib.gs_capi_layernorm_eps(self.struct))
        n = self.config["arena_bytes"] if arena_bytes is None else arena_bytes
        self.arena, addr = _aligned(n)
        engine.check(lib.gs_attach_arena(self.struct, addr, n), "gs_attach_arena")

    @property
    def vocab_size(self) -> int:
        return self.config["vocab_size"]

    @property
    def pos(self) -> int:
        return int(self.lib.gs_capi_pos(self.struct))

    def window(self) -> list[int]:
        out = (c_uint32 * self.config["block_size"])()
        n = self.lib.gs_capi_window(self.struct, out)
        return list(out)[:n]

    def reset(self) -> None:
        self.engine.check(self.lib.gs_reset(self.struct), "gs_reset")

    @property
    def weight_bytes(self) -> int:
        """gs_state.weight_bytes: artifact bytes gs_forward read since the arena was attached."""
        return int(self.lib.gs_capi_weight_bytes(self.struct))

    def record_slides(self) -> list[tuple[int, int]]:
        """Install a gs_on_slide callback; returns the list its (done, total) calls append to."""
        calls: list[tuple[int, int]] = []
        self._on_slide = SLIDE_FN(lambda _ctx, done, total: calls.append((done, total)))
        self.lib.gs_on_slide(self.struct, self._on_slide, None)
        return calls

    def forward_raw(self, token: int):
        """gs_forward; returns the engine's logits pointer (valid until the next call)."""
        ptr = POINTER(c_float)()
        self.engine.check(self.lib.gs_forward(self.struct, token, ctypes.byref(ptr)), "gs_forward")
        return ptr

    def forward(self, token: int) -> np.ndarray:
        """gs_forward; a copy of the (V,) float32 logits."""
        ptr = self.forward_raw(token)
        return np.ctypeslib.as_array(ptr, shape=(self.vocab_size,)).copy()

    def sample(self, logits: np.ndarray, temperature: float, top_k: int, rng: Rng | None) -> int:
        arr = np.ascontiguousarray(logits, dtype=np.float32)
        out = c_uint32()
        self.engine.check(
            self.lib.gs_sample(
                self.struct,
                arr.ctypes.data_as(POINTER(c_float)),
                temperature,
                top_k,
                rng.buf if rng is not None else None,
                ctypes.byref(out),
            ),
            "gs_sample",
        )
        return int(out.value)

    def generate(
        self, prompt: list[int], n_new: int, temperature: float = 1.0, top_k: int = 0, seed: int = 0
    ) -> list[int]:
        """The loop of FORMAT.md section 8, as gptstack.quant.sampling.generate runs it."""
        self.reset()
        rng = self.engine.rng(seed)
        for t in prompt:
            ptr = self.forward_raw(t)
        out = []
        for i in range(n_new):
            logits = np.ctypeslib.as_array(ptr, shape=(self.vocab_size,))
            tok = self.sample(logits, temperature, top_k, rng)
            out.append(tok)
            if i + 1 < n_new:
                ptr = self.forward_raw(tok)
        return out

    def encode(self, text: bytes | str, *, max_ids: int | None = None) -> list[int]:
        data = text.encode() if isinstance(text, str) else bytes(text)
        cap = len(data) if max_ids is None else max_ids
        ids = (c_uint32 * max(cap, 1))()
        n = c_size_t()
        self.engine.check(
            self.lib.gs_encode(self.struct, data, len(data), ids, cap, ctypes.byref(n)), "gs_encode"
        )
        return list(ids)[: n.value]

    def token_bytes(self, token: int) -> bytes:
        ptr, n = POINTER(c_uint8)(), c_size_t()
        self.engine.check(
            self.lib.gs_token_bytes(self.struct, token, ctypes.byref(ptr), ctypes.byref(n)),
            "gs_token_bytes",
        )
        return ctypes.string_at(ptr, n.value)

    def decoder(self) -> Decoder:
        return Decoder(self)


class Decoder:
    """A gs_decoder over one model."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.buf = ctypes.create_string_buffer(model.lib.gs_capi_decoder_bytes())
        model.lib.gs_decoder_init(self.buf)

    def push(self, token: int, *, max_out: int = 4096) -> bytes:
        out, n = (c_uint8 * max(max_out, 1))(), c_size_t()
        self.model.engine.check(
            self.model.lib.gs_decode(
                self.buf, self.model.struct, token, out, max_out, ctypes.byref(n)
            ),
            "gs_decode",
        )
        return bytes(out[: n.value])

    def flush(self, *, max_out: int = 4) -> bytes:
        out, n = (c_uint8 * max(max_out, 1))(), c_size_t()
        self.model.engine.check(
            self.model.lib.gs_decode_flush(self.buf, out, max_out, ctypes.byref(n)),
            "gs_decode_flush",
        )
        return bytes(out[: n.value])
