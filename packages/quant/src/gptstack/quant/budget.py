"""Memory plan of an artifact on a target: flash for the file, RAM for the engine's arena, and
the flash the engine reads per token.

    plan = memory_plan(artifact, "esp32s3"); check_fits(plan)   # QuantError says what to shrink
    plan = memory_plan(spec, "esp32s3", tables=tables)          # before training, from a config
    feed_read_bytes(spec, pos)      # artifact bytes one gs_forward reads (= gs_state.weight_bytes)

The RAM side is FORMAT.md section 11's arena (the engine allocates nothing else per model; a
window slide's re-encode tiles live inside it, in the K/V rows the slide discards); the flash
side is the whole `.gsm` file, read in place from its partition.
"""

from __future__ import annotations

from dataclasses import dataclass

from .artifact import Artifact
from .errors import QuantError
from .format import DTYPE_I8, arena_buffers, slide_tile_positions
from .layout import ModelSpec, plan_layout
from .tables import TokenizerTables


@dataclass(frozen=True)
class Budget:
    """What a target offers one model: arena RAM in one block, flash for the artifact."""

    name: str
    ram_bytes: int | None  # None: no limit
    flash_bytes: int | None
    ram_source: str
    flash_source: str


# The one table of hardware budgets (docs/CONVENTIONS.md: "Hardware budgets: one table each,
# with sources").
BUDGETS: dict[str, Budget] = {
    "esp32s3": Budget(
        name="esp32s3",
        # 280 KiB (286,720 bytes): the project's planning figure for the internal SRAM an
        # Arduino-ESP32 3.x (ESP-IDF 5.x) application can give the arena in one block; the arena
        # lives in internal SRAM (fast, and present on every S3 module). The S3 has 512 KB of
        # internal SRAM (ESP32-S3 datasheet); ROM, caches and the core take the rest. For scale,
        # public heap dumps on IDF 5.x show the main internal heap region at 265,392 bytes in
        # total (micropython/micropython#12075) and 267,552 (RomanLut/hx-esp32-cam-fpv#46), and
        # arduino-esp32#12010 reports internal heap "below 300kb". The figure is an estimate: keep
        # a margin, and the firmware checks heap_caps_get_largest_free_block(MALLOC_CAP_INTERNAL)
        # on the board before it allocates the arena.
        ram_bytes=286_720,
        # firmware/esp32/partitions.csv: data partition `model` at 0x200000, size 0x600000, on
        # an 8 MB flash; the engine reads the artifact in place from it (esp_partition_mmap).
        flash_bytes=0x600000,
        ram_source="internal SRAM for the arena, one block, Arduino-ESP32 3.x (see budget.py)",
        flash_source="partitions.csv: `model` data partition, 0x600000 bytes",
    ),
    "host": Budget("host", None, None, "no limit", "no limit"),
}

_KV = ("k_cache", "v_cache", "k_scale", "v_scale")
_ACTIVATIONS = ("x", "xn", "qkv", "att_out", "hidden", "act_q")
_LOGITS = ("logits",)
_SCRATCH = ("scores", "window", "candidates")


@dataclass(frozen=True)
class MemoryPlan:
    """Flash and RAM needs of one model on one target, with the budget and the margins.

    Flash: weights_bytes (int8 tensors), scales_bytes (their f32 row scales), float_bytes
    (LayerNorm parameters and biases), tokenizer_bytes, overhead_bytes (header, tensor table,
    alignment, CRC); file_bytes is the sum. RAM: arena (bytes per FORMAT.md section 11 buffer,
    in arena order), grouped as kv_cache, activations, logits, scratch; arena_bytes is the sum.
    Margins are budget − need (negative: does not fit), None without a budget.
    Slide re-encode (section 11): tiles of slide_tile_positions positions whose slide_tile_bytes
    lie in the K/V rows a slide discards (no RAM beyond the arena). Flash read: token_read_bytes
    per fed token, slide_read_bytes more for each window slide (feed_read_bytes).
    """

    target: str
    spec: ModelSpec
    weights_bytes: int
    scales_bytes: int
    float_bytes: int
    tokenizer_bytes: int
    overhead_bytes: int
    file_bytes: int
    arena: dict[str, int]
    arena_bytes: int
    ram_budget: int | None
    flash_budget: int | None
    slide_tile_positions: int
    slide_tile_bytes: int
    token_read_bytes: int
    slide_read_bytes: int

    def _group(self, names: tuple[str, ...]) -> int:
        return sum(self.arena[n] for n in names)

    @property
    def kv_cache_bytes(self) -> int:
        return self._group(_KV)

    @property
    def activation_bytes(self) -> int:
        return self._group(_ACTIVATIONS)

    @property
    def logits_bytes(self) -> int:
        return self._group(_LOGITS)

    @property
    def scratch_bytes(self) -> int:
        return self._group(_SCRATCH)

    @property
    def ram_margin(self) -> int | None:
        return None if self.ram_budget is None else self.ram_budget - self.arena_bytes

    @property
    def flash_margin(self) -> int | None:
        return None if self.flash_budget is None else self.flash_budget - self.file_bytes

    @property
    def fits(self) -> bool:
        return all(m is None or m >= 0 for m in (self.ram_margin, self.flash_margin))

    def lines(self) -> list[str]:
        """A short human-readable table (for `gptstack export` to print)."""

        def budget(need: int, have: int | None) -> str:
            if have is None:
                return f"{need:>10,} bytes"
            return f"{need:>10,} of {have:,} bytes ({have - need:+,} margin)"

        if self.slide_tile_positions:
            slide = (
                f"    window slide: tiles of {self.slide_tile_positions} positions "
                f"({self.slide_tile_bytes:,} bytes inside the KV cache rows the slide "
                "discards)"
            )
        else:
            slide = "    window slide: one position at a time (no tile fits the discarded KV rows)"
        flash = (
            f"    int8 weights {self.weights_bytes:,}, row scales {self.scales_bytes:,}, "
            f"f32 params {self.float_bytes:,}, tokenizer {self.tokenizer_bytes:,}, "
            f"header/table/padding {self.overhead_bytes:,}"
        )
        arena = (
            f"    KV cache {self.kv_cache_bytes:,}, activations {self.activation_bytes:,}, "
            f"logits {self.logits_bytes:,}, scratch {self.scratch_bytes:,}"
        )
        reads = (
            f"  flash read {self.token_read_bytes:,} bytes per token, "
            f"+{self.slide_read_bytes:,} per window slide"
        )
        return [
            f"memory plan for {self.target}",
            f"  flash  {budget(self.file_bytes, self.flash_budget)}",
            flash,
            f"  arena  {budget(self.arena_bytes, self.ram_budget)}",
            arena,
            slide,
            reads,
        ]


def memory_plan(
    source: Artifact | ModelSpec, target: str = "esp32s3", *, tables: TokenizerTables | None = None
) -> MemoryPlan:
    """The memory plan of an artifact, or of a config plus its tokenizer tables, on a target.

    Raises QuantError for an unknown target or a ModelSpec without tables.
    """
    if target not in BUDGETS:
        raise QuantError(f"target {target!r} is unknown: use one of {sorted(BUDGETS)}")
    if isinstance(source, Artifact):
        spec, entries = source.spec, source.entries
        tokenizer_bytes, file_bytes = source.header.tokenizer_bytes, source.header.file_bytes
    else:
        if tables is None:
            raise QuantError("a memory plan from a ModelSpec needs the tokenizer tables too")
        layout = plan_layout(source, tables)
        spec, entries = source, layout.entries
        tokenizer_bytes, file_bytes = layout.tokenizer_bytes, layout.file_bytes
    weights = sum(e.nbytes for e in entries if e.dtype == DTYPE_I8)
    scales = sum(4 * e.shape[0] for e in entries if e.dtype == DTYPE_I8)
    floats = sum(e.nbytes for e in entries if e.dtype != DTYPE_I8)
    arena = dict(arena_buffers(spec))
    budget = BUDGETS[target]
    P = slide_tile_positions(spec)
    return MemoryPlan(
        target=target,
        spec=spec,
        weights_bytes=weights,
        scales_bytes=scales,
        float_bytes=floats,
        tokenizer_bytes=tokenizer_bytes,
        overhead_bytes=file_bytes - weights - scales - floats - tokenizer_bytes,
        file_bytes=file_bytes,
        arena=arena,
        arena_bytes=sum(arena.values()),
        ram_budget=budget.ram_bytes,
        flash_budget=budget.flash_bytes,
        slide_tile_positions=P,
        slide_tile_bytes=P * (24 * spec.n_embd + 4),
        token_read_bytes=feed_read_bytes(spec, 0),
        slide_read_bytes=feed_read_bytes(spec, spec.block_size) - feed_read_bytes(spec, 0),
    )


def tile_read_bytes(spec: ModelSpec, n: int, *, logits: bool) -> int:
    """Artifact bytes the C engine reads running n positions as one tile (gs_forward.c): every
    weight matrix with its row scales (and bias) once per tile, the LayerNorm parameters and the
    embedding rows (wte and wpe, each C int8 + one f32 scale) once per position, and for logits
    ln_f and the tied head (all of wte)."""
    C, bias = spec.n_embd, spec.bias
    vectors = 2 if bias else 1  # f32 vectors per LayerNorm and per matrix's scales + bias

    def matrix(rows: int, cols: int) -> int:
        return rows * cols + 4 * rows * vectors

    layer = (
        matrix(3 * C, C)
        + matrix(C, C)
        + matrix(4 * C, C)
        + matrix(C, 4 * C)
        + n * 2 * 4 * C * vectors
    )
    total = n * 2 * (C + 4) + spec.n_layer * layer
    if logits:
        total += n * 4 * C * vectors + spec.vocab_size * C + 4 * spec.vocab_size
    return total


def feed_read_bytes(spec: ModelSpec, pos: int) -> int:
    """Artifact bytes one gs_forward reads at state position pos (0 .. T): the token's own pass
    with logits, after the window slide's re-encode when pos == T (FORMAT.md sections 8, 11)."""
    total = tile_read_bytes(spec, 1, logits=True)
    if pos == spec.block_size:
        half, done, P = spec.block_size // 2, 0, max(1, slide_tile_positions(spec))
        while done < half:
            n = min(P, half - done)
            total += tile_read_bytes(spec, n, logits=False)
            done += n
    return total


def check_fits(plan: MemoryPlan) -> MemoryPlan:
    """Return the plan if it fits its target; else raise QuantError saying by how much and what
    to shrink."""
    problems = []
    s = plan.spec
    if plan.ram_margin is not None and plan.ram_margin < 0:
        problems.append(
            f"the arena needs {plan.arena_bytes:,} bytes of RAM, {-plan.ram_margin:,} more than "
            f"the {plan.ram_budget:,} available: the int8 KV cache and its scales are "
            f"{plan.kv_cache_bytes:,} bytes (about 2·n_layer·block_size·n_embd = "
            f"2·{s.n_layer}·{s.block_size}·{s.n_embd}), "
            f"shrink block_size or n_layer; logits and candidates are "
            f"{plan.arena['logits'] + plan.arena['candidates']:,} bytes (8·vocab_size), shrink "
            f"the vocabulary"
        )
    if plan.flash_margin is not None and plan.flash_margin < 0:
        problems.append(
            f"the artifact is {plan.file_bytes:,} bytes, {-plan.flash_margin:,} more than the "
            f"{plan.flash_budget:,}-byte model partition: its int8 weights are "
            f"{plan.weights_bytes:,} bytes (about 12·n_layer·n_embd² + (vocab_size+block_size)·"
            f"n_embd), shrink n_embd or n_layer"
        )
    if problems:
        raise QuantError(f"the model does not fit {plan.target}: " + "; ".join(problems))
    return plan
