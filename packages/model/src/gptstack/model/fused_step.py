"""The two forwards of batch-1 generation through gptstack.cuda_ops' fused kernels.

    step = FusedDecodeStep(model, cache)      # ModelError if this model or build cannot
    logits = step(token, pos)                 # token (B, 1), pos 0-d int64 -> (B, V)
    logits = step.window(ids)                 # ids (B, T) at positions 0..T-1 -> (B, V)
    logits = step.slide(window, token)        # = step.window(cat(window[:, 1:], token))

`step(token, pos)` is `model(token, last_only=True, kv_cache=cache, pos=pos)`: one new position
against the cache, 5 launches per block plus 2 (the embedding, ln_f + LM head) instead of ~28
per block (csrc/decode.h has the layout). Opt-in (`ONE_LAUNCH = True`, or a step's
`blocks_in_one_launch`), a small model on sm_90 runs the embedding and every block as one
launch instead: a thread-block cluster of 16 SMs passing each phase's output through their
shared memory (decode_blocks), the same bits, but slower on the H200 so far (ONE_LAUNCH below).

`step.window(ids)` is `model(ids, last_only=True)`, the slide window's step once the context is
full (every position is re-run: absolute positions shift by one per token): cuBLAS matmuls
(the MLP's first with its bias and GELU in cuBLASLt's epilogue) with the fused LayerNorm,
residual-add + LayerNorm and attention kernels between them, and only the last row through
the last block's attention and everything after it. A batch-1 step is latency bound: a chain
of dependent kernels, each ~0.7 us of launch (programmatic, on the H100:
cuda_ops/dev/pdl_chain.cu) plus its own chain of reads, reductions and barriers, so fewer
launches and shorter chains are what make the graph decoder fast (tests compare both with the
model; numbers: benchmarks/JOURNAL.md's sampling paragraphs).
Dropout is never applied (decoding runs in eval mode).
"""

from __future__ import annotations

from operator import attrgetter

import torch
import torch.nn.functional as F
from torch import Tensor

from .config import cuda_kernels_unavailable, native_ops
from .errors import ModelError
from .kv_cache import StaticKVCache


def unsupported_reason(model, device: torch.device) -> str | None:
    """Why the fused step cannot run this model here, or None when it can."""
    dtypes = {p.dtype for p in model.parameters()}
    if len(dtypes) != 1:
        return f"the weights mix dtypes {sorted(map(str, dtypes))}; cast the model to one dtype"
    (dtype,) = dtypes
    try:
        ops = native_ops()
    except ModelError as e:
        return str(e)
    if device.type == "cuda":
        reason = cuda_kernels_unavailable(device)
        if reason is not None:
            return reason
        if dtype not in (torch.float32, torch.bfloat16):
            return f"the CUDA kernels take float32 or bfloat16 weights, not {dtype}"
        cfg, limits = model.config, ops.decode
        if cfg.head_size > limits.MAX_HEAD_SIZE or 4 * cfg.n_embd > limits.MAX_K:
            return (
                f"head size {cfg.head_size} / MLP width {4 * cfg.n_embd} is above the CUDA "
                f"kernels' limits ({limits.MAX_HEAD_SIZE} / {limits.MAX_K})"
            )
    return None


# decode_blocks is off by default because it loses to the op-by-op step on the H200 (side by
# side in benchmarks/profile_decode.py; the numbers and why: benchmarks/JOURNAL.md's sampling
# paragraphs and benchmarks/profiles/decode-blocks-phases-h200-20261204.txt). True: every
# eligible step uses it (blocks_reason), the A/B switch of the benchmarks.
ONE_LAUNCH = False

# window(): the most rows (B * T) a slide window may have for its blocks' matrices to run
# through decode_linear's tensor-core kernel (LayerNorm, GELU and residual inside it: 5 launches
# a block, where FusedDecodeStep.rows_kernel_runs); a wider window, or 0, runs cuBLAS matmuls
# between the fused LayerNorm, add + LayerNorm and GELU kernels (7). Side by side on the H100
# (2026-12-06, evening, the kernel compiled for the presets' widths): 8,919 vs 8,558 tok/s at
# esp32 (64 rows), 6,948 vs 7,906 at shakespeare-char (256 rows: there it reads the weights
# once per 32-row tile, ~10 MB of L2 traffic a matrix). The A/B switch of the benchmarks.
WINDOW_ROWS = 64

# window() through decode_linear (WINDOW_ROWS): True = each block's ln_1, c_attn and attention
# as one window_attention launch where the window is short enough (T <= its
# WINDOW_ATTENTION_MAX_T, head size 32 or 64: esp32's 64-token window), the same bits as
# decode_linear followed by causal_attention: 9,684 vs 9,369 tok/s at esp32 side by side on
# the H100 (2026-12-06). The A/B switch of the benchmarks.
WINDOW_ATTENTION = True

# window() with WINDOW_ATTENTION: True = each block's attn.c_proj (+ residual) in its
# window_attention launch too (proj_weight: the sequence's heads as a thread-block cluster
# passing their outputs through distributed shared memory), 3 launches a block instead of 4, the
# same bits. Off: it lost on the H100 (2026-12-06, side by side at esp32: 9,104 vs 9,579 tok/s
# with it; 8.72 vs 8.14 us a call in a chain against window_attention and a decode_linear: each
# CTA takes in all 64 rows of y, 32 KiB through distributed shared memory, where c_proj's own
# CTAs read 16 KiB each from L2). The A/B switch of the benchmarks.
WINDOW_ATTENTION_PROJ = False

# True: a step's last block after its attention and the LM head, for the one row it needs of
# each sequence (c_proj, ln_2, the MLP, ln_f, lm_head), as one decode_tail launch (a
# thread-block cluster passing x1, h and x2 through distributed shared memory) where n_embd is
# one of its TAIL_WIDTHS, instead of four decode_linear launches, the same bits. Off: it lost on
# the H100 (2026-12-06, side by side at esp32: 8,959 vs 9,353 tok/s with it; 7.84 vs 7.60 us a
# call in a chain against the four launches, which overlap each one's weight loads and launch
# with the kernel before, where its one CTA path waits through three exchanges). The A/B
# switch of the benchmarks.
TAIL = False

# slide() with IO_KERNELS and WINDOW_ATTENTION: True = the window's ids embedded inside the
# first block's window_attention launch (embedded_window_attention: x written there for the
# block's residual) instead of a window_embed launch before it, the same bits. Off: it lost on
# the H100 (2026-12-06: 6.88 vs 6.62 us a call in a chain against window_embed and
# window_attention, the ids' and then the wte rows' round trips to L2 now on the attention's
# path after its wait; 8,959 tok/s with it and decode_tail against 9,193 without it). The A/B
# switch of the benchmarks.
WINDOW_EMBED_IN_ATTENTION = False

# window() through decode_linear (WINDOW_ROWS): True = each block's mlp.c_proj (K = 4C in
# decode.SPLIT_WIDTHS: esp32's 1,024) with K split over a thread-block cluster of 4 CTAs
# (decode_linear(split_k=True): 32 CTAs of a 16-step mma chain instead of 8 of a 64-step one;
# deterministic, other bits than the unsplit kernel): 9,695 vs 9,530 tok/s at esp32 side by
# side on the H100 (2026-12-06), 3.16 vs 3.47 us a call in a chain. attn.c_proj (K = 256) split
# too took 2.14 vs 2.52 us alone but left the block's chain no faster (10.36 vs 10.38 us) and
# is not split. The A/B switch of the benchmarks.
WINDOW_SPLIT_K = True

# window() through decode_linear (WINDOW_ROWS): True = each block's attn.c_proj (+ residual),
# ln_2, mlp.c_fc (+ GELU) and mlp.c_proj (+ residual) as one window_mlp launch where the model
# is narrow (n_embd in its WINDOW_MLP_WIDTHS: esp32's 256), the same bits as the three
# decode_linear calls. Off: it lost on the H100 (2026-12-06, side by side at esp32: 9,022 vs
# 9,526 tok/s with it; 12.5 vs 10.6 us a call in a chain against the three launches, its
# critical path one CTA's three products and two exchanges through distributed shared memory,
# where the three launches overlap each one's weight loads with the kernel before). Where
# WINDOW_ATTENTION_PROJ applies, c_proj is already done and this does not. The A/B switch of
# the benchmarks.
WINDOW_MLP = False

# window() with cuBLAS matmuls: True = the MLP's first matmul applies its bias (zeros where the
# model has none) and the tanh GELU in cuBLASLt's epilogue (torch._addmm_activation: one launch
# instead of a matmul and a GELU kernel) on CUDA, and the last block's attention is computed
# for the last row alone (SDPA of one query over the window) instead of for every row: 7,853 vs
# 7,470 tok/s at esp32 and 6,410 vs 6,376 at shakespeare-char on the H100 (before the zeros:
# shakespeare-char's preset has no biases, so its GELU stayed a kernel). The A/B switch of the
# benchmarks; ZERO_BIAS_EPILOGUE = False keeps a bias-free model's GELU a kernel.
WINDOW_EPILOGUES = True
ZERO_BIAS_EPILOGUE = True

# True: the fed ids' embedding (decode_embed; window_embed for the slide window) and the graph
# decoder's state update after each token (decode_advance) as gptstack.cuda_ops kernels, one
# launch each, instead of PyTorch's index_select, add, index_copy and copies (seven launches a
# cached step, six a slide step, none of them programmatic). The A/B switch of the benchmarks.
IO_KERNELS = True

# With IO_KERNELS, where cuda_ops' sampler draws the tokens (graph_decoding: a temperature, no
# top-p): True = its last block to finish also updates the decoder's state, instead of a
# decode_advance launch after it. The A/B switch of the benchmarks.
ADVANCE_IN_SAMPLER = True

# decode_blocks reads every weight of a step with 16 SMs (~1 TB/s on the H200, against ~4 for
# the op-by-op kernels spread over the whole GPU), so it is only for small models:
# shakespeare-char's blocks are 21 MB in bfloat16.
ONE_LAUNCH_MAX_BYTES = 48 << 20


def blocks_reason(model, device: torch.device) -> str | None:
    """Why the step's blocks do not run as one decode_blocks launch here (None: they do)."""
    if device.type != "cuda":
        return "one launch is for CUDA (on the CPU the ops run in turn either way)"
    if torch.cuda.get_device_capability(device)[0] < 9:
        return "thread-block clusters need compute capability 9.0 or newer"
    cfg, ops = model.config, native_ops()
    width = 8 if model.wte.weight.dtype == torch.bfloat16 else 4
    if cfg.head_size % width or cfg.n_layer > ops.decode.MAX_LAYERS:
        return f"head size {cfg.head_size} or {cfg.n_layer} layers is outside its limits"
    params = [p for b in model.h for p in b.parameters()]
    size = sum(p.numel() * p.element_size() for p in params)
    if size > ONE_LAUNCH_MAX_BYTES:
        return f"the blocks' {size / 2**20:.0f} MiB are more than 16 SMs read fast"
    if cfg.n_embd > ops.decode.BLOCKS_MAX_C:
        return f"n_embd {cfg.n_embd} is above the kernel's {ops.decode.BLOCKS_MAX_C}"
    dtype = model.wte.weight.dtype
    need = ops.decode.blocks_shared_bytes(cfg.n_embd, cfg.head_size, cfg.block_size, dtype)
    have = torch.cuda.get_device_properties(device).shared_memory_per_block_optin
    if need + 1024 > have:  # + the kernel's static shared memory
        return f"a CTA would need {need} bytes of shared memory, this GPU has {have}"
    if any(p.data_ptr() % 16 for p in params):
        return "a weight is not 16-byte aligned"
    return None


class FusedDecodeStep:
    """Callable (token (B, 1) int64, pos 0-d int64 tensor) -> logits (B, V) for `model`, reading
    and writing `cache` like the model's own forward does."""

    def __init__(self, model, cache: StaticKVCache) -> None:
        device = model.wte.weight.device
        reason = unsupported_reason(model, device)
        if reason is not None:
            raise ModelError(f"the fused decode step cannot run: {reason}")
        self.model, self.cache = model, cache
        self.ops = native_ops()
        self.eps = model.ln_f.eps
        # the window's attention: gptstack.cuda_ops' kernel where it has the head size, else
        # (or False here: the A/B switch of benchmarks/profile_decode.py) PyTorch's SDPA
        self.native_attention = True
        # every block in one launch (decode_blocks): opt-in, see ONE_LAUNCH
        self.blocks_in_one_launch = ONE_LAUNCH and blocks_reason(model, device) is None
        # window() through decode_linear up to this many rows (see WINDOW_ROWS); tests set it on
        # a CPU too, where the rows run through the CPU reference
        self.window_rows = WINDOW_ROWS if self.rows_kernel_runs() else 0
        # window()'s c_attn and attention in one launch (see WINDOW_ATTENTION), c_proj too
        # (WINDOW_ATTENTION_PROJ)
        self.window_attention = WINDOW_ATTENTION
        self.window_attention_proj = WINDOW_ATTENTION_PROJ
        # window()'s mlp.c_proj with K over a cluster of CTAs (see WINDOW_SPLIT_K)
        self.window_split_k = WINDOW_SPLIT_K
        # slide()'s ids embedded in the first block's window_attention (see
        # WINDOW_EMBED_IN_ATTENTION)
        self.window_embed_in_attention = WINDOW_EMBED_IN_ATTENTION
        # the last block's rest and the head in one launch (see TAIL)
        self.tail = TAIL
        # window()'s c_proj, ln_2 and MLP in one launch (see WINDOW_MLP)
        self.window_mlp = WINDOW_MLP
        # window()'s GELU epilogue and last-row attention (see WINDOW_EPILOGUES)
        self.window_epilogues = WINDOW_EPILOGUES
        # the embeddings by decode_embed / window_embed (see IO_KERNELS)
        self.io_kernels = IO_KERNELS
        # _fc_gelu's bias for MLPs without one (see ZERO_BIAS_EPILOGUE), made here, not inside a
        # graph capture; every block's c_fc has one shape, dtype and device
        self.zero_bias_epilogue = ZERO_BIAS_EPILOGUE
        w = model.h[0].mlp.c_fc.weight
        self._fc_zero_bias = torch.zeros(w.size(0), dtype=w.dtype, device=w.device)
        self._layers = [  # decode_blocks' order; None for a missing bias
            attrgetter(name)(block) for block in model.h for name in self.ops.decode.LAYER_TENSORS
        ]

    def __call__(self, token: Tensor, pos: Tensor) -> Tensor:
        m, ops, eps = self.model, self.ops, self.eps
        if self.blocks_in_one_launch:
            x = ops.decode_blocks(
                token, pos, m.wte.weight, m.wpe.weight, self._layers, self.cache.k, self.cache.v,
                eps=eps,
            )  # fmt: skip
            return self._head(x)
        if self.io_kernels:
            x = ops.decode_embed(token, pos, m.wte.weight, m.wpe.weight)
        else:  # index_select, not weight[pos]: indexing with a 0-d tensor reads it on the host,
            # which a CUDA-graph capture refuses
            tok, p = token[:, 0], pos.view(1)
            x = m.wte.weight.index_select(0, tok) + m.wpe.weight.index_select(0, p)
        *blocks, last = m.h
        for i, block in enumerate(blocks):
            y = ops.decode_attention(self._qkv(block, x), self.cache.k[i], self.cache.v[i], pos)
            x = self._after_attention(block, x, y)
        i = len(blocks)
        y = ops.decode_attention(self._qkv(last, x), self.cache.k[i], self.cache.v[i], pos)
        return self._last_row(last, x, y)

    def _last_row(self, block, x: Tensor, y: Tensor) -> Tensor:
        """Logits (B, V) from the last block's rows x (B, C) and their attention y (B, C): the
        rest of the block, then the head, as one decode_tail launch (TAIL) or four."""
        if not self.tail:
            return self._head(self._after_attention(block, x, y))
        attn, mlp, m = block.attn, block.mlp, self.model
        return self.ops.decode_tail(
            y, x, [attn.c_proj.weight, attn.c_proj.bias, block.ln_2.weight, block.ln_2.bias,
                   mlp.c_fc.weight, mlp.c_fc.bias, mlp.c_proj.weight, mlp.c_proj.bias,
                   m.ln_f.weight, m.ln_f.bias, m.lm_head.weight],
            eps=self.eps,
        )  # fmt: skip

    def _qkv(self, block, x: Tensor) -> Tensor:
        """c_attn(ln_1(x)) for rows x (R, C) -> (R, 3C), in one decode_linear launch."""
        attn, ln = block.attn, block.ln_1
        return self.ops.decode_linear(
            x, attn.c_attn.weight, attn.c_attn.bias, ln_weight=ln.weight, ln_bias=ln.bias,
            eps=self.eps,
        )  # fmt: skip

    def _after_attention(self, block, x: Tensor, y: Tensor, split_k: bool = False) -> Tensor:
        """The rest of a block for rows x (B, C) with attention output y (B, C):
        x + c_proj(y), then + mlp(ln_2(.)), in three launches."""
        attn = block.attn
        x = self.ops.decode_linear(y, attn.c_proj.weight, attn.c_proj.bias, residual=x)
        return self._mlp(block, x, split_k)

    def _mlp(self, block, x: Tensor, split_k: bool = False) -> Tensor:
        """x + mlp(ln_2(x)) for rows x (B, C), in two launches; split_k: mlp.c_proj's K over a
        cluster of CTAs where decode_linear does that (WINDOW_SPLIT_K)."""
        mlp, ops = block.mlp, self.ops
        h = ops.decode_linear(
            x, mlp.c_fc.weight, mlp.c_fc.bias,
            ln_weight=block.ln_2.weight, ln_bias=block.ln_2.bias, gelu=True, eps=self.eps,
        )  # fmt: skip
        return ops.decode_linear(h, mlp.c_proj.weight, mlp.c_proj.bias, residual=x, split_k=split_k)

    def _head(self, x: Tensor) -> Tensor:
        m = self.model
        return self.ops.decode_linear(
            x, m.lm_head.weight, None, ln_weight=m.ln_f.weight, ln_bias=m.ln_f.bias, eps=self.eps
        )  # (B, V)

    def _heads(self, qkv: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v (B, nh, T, hs) as views of qkv (B, T, 3C)."""
        B, T, C3 = qkv.shape
        nh = self.model.config.n_head
        hs = C3 // 3 // nh
        return tuple(t.view(B, T, nh, hs).transpose(1, 2) for t in qkv.split(C3 // 3, dim=2))

    def _attend(self, qkv: Tensor) -> Tensor:
        """Causal attention of every head over qkv (B, T, 3C) -> y (B, T, C)."""
        q, k, v = self._heads(qkv)
        if self.native_attention and q.size(-1) in self.ops.attention.HEAD_SIZES:
            # q, k, v read in place; y comes back as a view of a (B, T, nh, hs) buffer
            y = self.ops.causal_attention(q, k, v)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(qkv.size(0), qkv.size(1), -1)

    def _attend_last(self, qkv: Tensor) -> Tensor:
        """The last row's attention over every row of qkv (B, T, 3C) -> y (B, C): what
        `_attend(qkv)[:, -1]` gives, for one query instead of T (the last row sees every key,
        so no mask)."""
        if not self.window_epilogues:
            return self._attend(qkv)[:, -1]
        q, k, v = self._heads(qkv)
        y = F.scaled_dot_product_attention(q[:, :, -1:], k, v)  # (B, nh, 1, hs)
        return y.reshape(qkv.size(0), -1)

    def _fc_gelu(self, h: Tensor, fc) -> Tensor:
        """gelu_tanh(fc(h)) for rows h (..., C). On CUDA, torch._addmm_activation: one cuBLASLt
        call whose epilogue adds the bias and applies the tanh GELU to the float accumulators
        (rounded to the dtype once, where a matmul and a GELU kernel round the matmul's output
        first); a layer without a bias adds zeros (+ 0 changes no sum), which keeps the GELU in
        the matmul (shakespeare-char's preset has no biases: 5 launches a slide step). Not on a
        CPU: there _addmm_activation's GELU is the erf form."""
        bias = fc.bias
        if bias is None and self.zero_bias_epilogue:
            bias = self._fc_zero_bias
        if self.window_epilogues and h.is_cuda and bias is not None:
            rows = h.reshape(-1, h.size(-1))
            f = torch._addmm_activation(bias, rows, fc.weight.t(), use_gelu=True)
            return f.view(*h.shape[:-1], f.size(-1))
        return self.ops.gelu_tanh(F.linear(h, fc.weight, fc.bias))

    def rows_kernel_runs(self) -> bool:
        """Whether decode_linear runs this model's window on tensor cores: on CUDA in bfloat16
        (csrc/decode_mma.cuh; widths up to decode.MMA_MAX_K). Elsewhere decode_linear is a
        one-row kernel or scalar CPU code, slower than a matmul over a whole window."""
        w = self.model.wte.weight
        C = self.model.config.n_embd
        return (
            w.device.type == "cuda"
            and w.dtype == torch.bfloat16
            and C % 16 == 0
            and 4 * C <= self.ops.decode.MMA_MAX_K
        )

    def window(self, ids: Tensor) -> Tensor:
        """Logits (B, V) of the last position of ids (B, T), T <= block_size, fed at positions
        0..T-1 with no cache: `model(ids, last_only=True)[0][:, -1]`."""
        m = self.model
        return self._window_rows(F.embedding(ids, m.wte.weight) + m.wpe.weight[: ids.size(1)])

    def slide(self, window: Tensor, token: Tensor) -> Tensor:
        """window(cat(window[:, 1:], token)): the slide step's logits (B, V) once token (B, 1)
        is fed to the full window (B, T), its ids embedded in one launch (window_embed)."""
        if not self.io_kernels:
            return self.window(torch.cat([window[:, 1:], token], dim=1))
        m = self.model
        B, T = window.shape
        if (
            self.window_embed_in_attention
            and self._rows_path(B, T)
            and (self._attention_in_one_launch(T) and not self.window_attention_proj)
        ):  # window_embed inside the first block's window_attention launch
            first = m.h[0]
            x, y = self.ops.embedded_window_attention(
                window, token, m.wte.weight, m.wpe.weight, first.attn.c_attn.weight,
                first.attn.c_attn.bias, ln_weight=first.ln_1.weight, ln_bias=first.ln_1.bias,
                n_head=m.config.n_head, eps=self.eps,
            )  # fmt: skip
            return self._window_rows(x, first_attention=y)
        return self._window_rows(self.ops.window_embed(window, token, m.wte.weight, m.wpe.weight))

    def _rows_path(self, B: int, T: int) -> bool:
        """Whether _window_rows runs a window of B sequences of T rows through decode_linear's
        tensor-core kernel (WINDOW_ROWS), not cuBLAS matmuls."""
        return self.ops.decode.MMA_MIN_ROWS <= B * T <= self.window_rows

    def _window_rows(self, x: Tensor, first_attention: Tensor | None = None) -> Tensor:
        """window() for the embedded rows x (B, T, C); first_attention: the first block's
        _window_attention of x where the caller has it (embedded_window_attention)."""
        m = self.model
        B, T, C = x.shape
        if not self._rows_path(B, T):
            return self._window_matmuls(x)
        x = x.view(B * T, C)
        *blocks, last = m.h
        one_launch = self._attention_in_one_launch(T)
        proj = one_launch and self.window_attention_proj
        for i, block in enumerate(blocks):
            if proj:  # x + c_proj(attention), then the MLP
                x = self._window_attention(block, x.view(B, T, C), proj=True).view(B * T, C)
                x = self._mlp(block, x, self.window_split_k)
                continue
            if i == 0 and first_attention is not None:
                y = first_attention.view(B * T, C)
            elif one_launch:
                y = self._window_attention(block, x.view(B, T, C)).view(B * T, C)
            else:
                y = self._attend(self._qkv(block, x).view(B, T, 3 * C)).reshape(B * T, C)
            x = self._window_after_attention(block, x, y)
        # the last block: every position's keys and values, then the last row alone
        if proj:
            x = self._window_attention(last, x.view(B, T, C), proj=True)[:, -1].contiguous()
            return self._head(self._mlp(last, x))
        if not blocks and first_attention is not None:  # one block: the first is the last
            y = first_attention[:, -1]
        elif one_launch:  # (every row's attention: inside one launch it costs next to nothing)
            y = self._window_attention(last, x.view(B, T, C))[:, -1]
        else:
            y = self._attend_last(self._qkv(last, x).view(B, T, 3 * C))  # (B, C)
        return self._last_row(last, x.view(B, T, C)[:, -1].contiguous(), y.contiguous())

    def _window_after_attention(self, block, x: Tensor, y: Tensor) -> Tensor:
        """_after_attention for the window's rows x (B * T, C) and their attention y: c_proj
        (+ residual), ln_2, c_fc (+ GELU) and mlp.c_proj (+ residual) as one window_mlp launch
        where WINDOW_MLP applies (n_embd in WINDOW_MLP_WIDTHS; _window_rows has at least
        MMA_MIN_ROWS rows), else _after_attention's decode_linear calls (mlp.c_proj with
        split_k as WINDOW_SPLIT_K says); the same bits either way where K is not split."""
        if not (self.window_mlp and x.size(1) in self.ops.decode.WINDOW_MLP_WIDTHS):
            return self._after_attention(block, x, y, self.window_split_k)
        attn, mlp = block.attn, block.mlp
        return self.ops.window_mlp(
            y, x, attn.c_proj.weight, attn.c_proj.bias, mlp.c_fc.weight, mlp.c_fc.bias,
            mlp.c_proj.weight, mlp.c_proj.bias, ln_weight=block.ln_2.weight,
            ln_bias=block.ln_2.bias, eps=self.eps,
        )  # fmt: skip

    def _attention_in_one_launch(self, T: int) -> bool:
        """Whether _window_rows runs a block's c_attn and attention as one window_attention
        launch for windows of T rows (see WINDOW_ATTENTION)."""
        decode, hs = self.ops.decode, self.model.config.head_size
        return (
            self.window_attention
            and self.native_attention
            and T <= decode.WINDOW_ATTENTION_MAX_T
            and hs in decode.WINDOW_ATTENTION_HEAD_SIZES
        )

    def _window_attention(self, block, x: Tensor, proj: bool = False) -> Tensor:
        """y (B, T, C): the causal attention of block over the rows x (B, T, C), ln_1 and c_attn
        included, in one launch on CUDA (window_attention); proj: x + c_proj(y) instead, in
        that launch too (WINDOW_ATTENTION_PROJ)."""
        attn = block.attn
        return self.ops.window_attention(
            x, attn.c_attn.weight, attn.c_attn.bias, ln_weight=block.ln_1.weight,
            ln_bias=block.ln_1.bias, n_head=self.model.config.n_head, eps=self.eps,
            proj_weight=attn.c_proj.weight if proj else None,
            proj_bias=attn.c_proj.bias if proj else None,
        )  # fmt: skip

    def _window_matmuls(self, x: Tensor) -> Tensor:
        """window() for the embedded rows x (B, T, C) with cuBLAS matmuls between the fused
        LayerNorm, add + LayerNorm and attention kernels (and a GELU kernel where _fc_gelu
        does not put it in the matmul)."""
        m, ops, eps = self.model, self.ops, self.eps
        *blocks, last = m.h
        # x + mlp(...) of one block and ln_1 of the next are one add_layernorm
        block = blocks[0] if blocks else last
        h = ops.layernorm(x, block.ln_1.weight, block.ln_1.bias, eps)
        for i, block in enumerate(blocks):
            attn, mlp = block.attn, block.mlp
            y = self._attend(F.linear(h, attn.c_attn.weight, attn.c_attn.bias))
            y = F.linear(y, attn.c_proj.weight, attn.c_proj.bias)
            x, h = ops.add_layernorm(x, y, block.ln_2.weight, block.ln_2.bias, eps)
            y = F.linear(self._fc_gelu(h, mlp.c_fc), mlp.c_proj.weight, mlp.c_proj.bias)
            following = blocks[i + 1] if i + 1 < len(blocks) else last
            x, h = ops.add_layernorm(x, y, following.ln_1.weight, following.ln_1.bias, eps)
        # the last block: every position's keys and values, then the last row alone
        attn = last.attn
        y = self._attend_last(F.linear(h, attn.c_attn.weight, attn.c_attn.bias))  # (B, C)
        return self._last_row(last, x[:, -1].contiguous(), y.contiguous())
