"""GPT: a nanoGPT-shaped pre-LayerNorm transformer language model, written from scratch.

    idx (B, T) -> wte + wpe -> N x Block -> ln_f -> lm_head (tied to wte) -> logits (B, T, V)
    Block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))

With `GPTConfig(ops="gptstack")` the same modules (same parameters) call gptstack.cuda_ops for
LayerNorm, the residual add before ln_2 fused with it, the MLP with its GELU in the matmuls'
epilogues, and ln_f's output -> loss without the full logits; `ops="gptstack:loss"` (or any
comma-separated subset of layernorm, gelu, mlp, loss, qkv)
for those alone; `ops="torch"` (default) is the reference they are tested against.
With `fp8="head"` or `"all"` the LM head's (or every Linear's) training matmuls run in FP8
(fp8.py; evaluation and sampling in the model's own precision). With `residual="bf16"` the
residual stream x is bf16 wherever bf16 autocast is on (config.py's RESIDUAL_CHOICES).

Parameter names are a contract shared with the int8 artifact and the C engine (README.md):
`wte.weight`, `wpe.weight`, `h.{i}.ln_1.*`, `h.{i}.attn.c_attn.*`, `h.{i}.attn.c_proj.*`,
`h.{i}.ln_2.*`, `h.{i}.mlp.c_fc.*`, `h.{i}.mlp.c_proj.*`, `ln_f.*`, and the tied `lm_head.weight`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import Position, get_attention_backend
from .config import GPTConfig, native_ops
from .errors import ModelConfigError, ModelError
from .fp8 import Fp8Linear
from .kv_cache import KVCache, StaticKVCache
from .optimizer import configure_adamw

AnyKVCache = KVCache | StaticKVCache

# LayerNorm epsilon 1e-5, as in GPT-2's reference implementation (openai/gpt-2 src/model.py,
# `norm(..., epsilon=1e-5)`) and PyTorch's default. The C engine uses the same value.
LAYER_NORM_EPS = 1e-5
# Initial weight std 0.02: GPT-1 paper (Radford et al. 2018, section 4.1, "N(0, 0.02)"),
# kept by GPT-2 and nanoGPT's `_init_weights`.
INIT_STD = 0.02


@dataclass(frozen=True)
class NativeOps:
    """The gptstack.cuda_ops functions a model calls where its `ops` names them (None: PyTorch's
    module computes that op). A plain object, so the model still deep-copies and pickles."""

    layernorm: Callable[..., Tensor] | None
    add_layernorm: Callable[..., tuple[Tensor, Tensor]] | None
    gelu_tanh: Callable[[Tensor], Tensor] | None
    mlp_gelu: Callable[..., Tensor] | None
    linear_cross_entropy: Callable[..., Tensor] | None
    qkv_heads: Callable[..., tuple[Tensor, Tensor, Tensor]] | None

    @classmethod
    def of(cls, config: GPTConfig) -> NativeOps:
        names = config.native_op_names
        if not names:
            return cls(None, None, None, None, None, None)
        m = native_ops()
        ln, mlp = "layernorm" in names, "mlp" in names
        return cls(
            m.layernorm if ln else None,
            m.add_layernorm if ln else None,
            # "mlp" on a CPU is the native GELU between PyTorch's matmuls (no epilogues there)
            m.gelu_tanh if "gelu" in names or mlp else None,
            m.mlp_gelu if mlp else None,
            m.linear_cross_entropy if "loss" in names else None,
            m.qkv_heads if "qkv" in names else None,
        )


def _autocasts_to_bf16(device_type: str) -> bool:
    return (
        torch.is_autocast_enabled(device_type)
        and torch.get_autocast_dtype(device_type) == torch.bfloat16
    )


def norm_params(ln: nn.LayerNorm, x: Tensor) -> tuple[Tensor, Tensor | None]:
    """ln's gain and bias in x's dtype, for the native LayerNorm (one dtype for all three): with
    config.residual="bf16" x is bf16 while the parameters stay fp32, and they are cast as
    autocast casts a Linear's weight (the gradients flow back through the cast)."""
    if ln.weight.dtype == x.dtype:
        return ln.weight, ln.bias
    return ln.weight.to(x.dtype), None if ln.bias is None else ln.bias.to(x.dtype)


def block_linear(config: GPTConfig, n_in: int, n_out: int) -> nn.Linear:
    """A block's Linear: FP8 training matmuls where config.fp8 is "all" (fp8.py)."""
    linear = Fp8Linear if config.fp8 == "all" else nn.Linear
    return linear(n_in, n_out, bias=config.bias)


class CausalSelfAttention(nn.Module):
    """All heads from one batched `c_attn` matmul; q, k, v are its three consecutive C-blocks."""

    def __init__(self, config: GPTConfig, layer_idx: int) -> None:
        super().__init__()
        self.c_attn = block_linear(config, config.n_embd, 3 * config.n_embd)
        self.c_proj = block_linear(config, config.n_embd, config.n_embd)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.backend = config.attention
        self.layer_idx = layer_idx
        qkv_heads = NativeOps.of(config).qkv_heads
        # the native qkv backward (cuda_ops qkv.py) replaces nn.Linear's bias gradient, not FP8's
        self.qkv_heads = qkv_heads if type(self.c_attn) is nn.Linear else None

    def forward(self, x: Tensor, kv_cache: AnyKVCache | None = None, pos: Position = 0) -> Tensor:
        B, T, C = x.size()
        nh, hs = self.n_head, C // self.n_head
        # q, k, v: (B, T, C) each, c_attn's three consecutive C-blocks; head h owns [h*hs, (h+1)*hs)
        if self.qkv_heads is not None and kv_cache is None and torch.is_grad_enabled():
            # the same values; the backward joins dq, dk, dv and sums c_attn's bias gradient in
            # one pass (the bias is added detached: its gradient comes from qkv_heads)
            bias = self.c_attn.bias
            qkv = F.linear(x, self.c_attn.weight, None if bias is None else bias.detach())
            q, k, v = self.qkv_heads(qkv, bias)
        else:
            q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        v = v.view(B, T, nh, hs).transpose(1, 2)  # (B, nh, T, hs)
        q_start, kv_len = 0, None
        if kv_cache is not None:
            k, v, kv_len = kv_cache.update(self.layer_idx, k, v, pos)  # (B, nh, Tk, hs)
            q_start = pos
            if k.dtype != q.dtype:  # cache dtype follows the weights; autocast may differ
                k, v = k.to(q.dtype), v.to(q.dtype)
        attend = get_attention_backend(self.backend)
        y = attend(
            q,
            k,
            v,
            q_start=q_start,
            kv_len=kv_len,
            dropout_p=self.dropout if self.training else 0.0,
        )  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble heads: (B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """Position-wise feed-forward: C -> 4C -> GELU(tanh) -> C (GPT-2's hidden width is 4C)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = block_linear(config, config.n_embd, 4 * config.n_embd)
        # tanh approximation: the GELU GPT-2 was trained with (openai/gpt-2 src/model.py `gelu`).
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = block_linear(config, 4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)
        self.native = NativeOps.of(config)

    def forward(self, x: Tensor, residual: Tensor) -> Tensor:
        """residual + the MLP of x (the block's second residual add)."""
        mlp_gelu = self.native.mlp_gelu
        if mlp_gelu is not None and x.is_cuda:  # GELU inside the matmuls' epilogues
            fc, proj = self.c_fc, self.c_proj
            params = (fc.weight, fc.bias, proj.weight, proj.bias)
            if self.dropout.p == 0 or not self.training:
                cuda = torch.is_autocast_enabled("cuda")
                matmul_dtype = torch.get_autocast_dtype("cuda") if cuda else x.dtype
                if residual.dtype == matmul_dtype:  # c_proj adds it as it stores (bf16 stream)
                    return mlp_gelu(x, *params, residual=residual)
            return residual + self.dropout(mlp_gelu(x, *params))
        h = self.c_fc(x)  # (B, T, 4C)
        gelu = self.native.gelu_tanh
        h = self.gelu(h) if gelu is None else gelu(h)
        return residual + self.dropout(self.c_proj(h))


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln_1(x)), then + mlp(ln_2(x))."""

    def __init__(self, config: GPTConfig, layer_idx: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=LAYER_NORM_EPS, bias=config.bias)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=LAYER_NORM_EPS, bias=config.bias)
        self.mlp = MLP(config)
        self.native = NativeOps.of(config)

    def forward(self, x: Tensor, kv_cache: AnyKVCache | None = None, pos: Position = 0) -> Tensor:
        if self.native.layernorm is None:
            x = x + self.attn(self.ln_1(x), kv_cache, pos)
            return self.mlp(self.ln_2(x), x)
        # native LayerNorm: the same block, with x + attn(...) and ln_2 in one pass
        n = self.native
        y = self.attn(n.layernorm(x, *norm_params(self.ln_1, x), LAYER_NORM_EPS), kv_cache, pos)
        x, h = n.add_layernorm(x, y, *norm_params(self.ln_2, x), LAYER_NORM_EPS)
        return self.mlp(h, x)


class GPT(nn.Module):
    """The language model. Build with a `GPTConfig`; see the module docstring for the layout."""

    # alias -> owner: names in state_dict() that are the same tensor as another; files omit them.
    tied_parameters = {"lm_head.weight": "wte.weight"}

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ModelConfigError(f"GPT needs a GPTConfig, got {type(config).__name__}")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)  # (V, C)
        self.wpe = nn.Embedding(config.block_size, config.n_embd)  # (block_size, C)
        self.drop = nn.Dropout(config.dropout)
        self.h = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.n_embd, eps=LAYER_NORM_EPS, bias=config.bias)
        head = Fp8Linear if config.fp8 in ("head", "all") else nn.Linear
        self.lm_head = head(config.n_embd, config.vocab_size, bias=False)
        self.native = NativeOps.of(config)
        # Weight tying (Press & Wolf 2017, "Using the Output Embedding to Improve Language
        # Models"; GPT-2 does the same): the head reads logits against the input embeddings.
        self.lm_head.weight = self.wte.weight
        self.apply(self._init_weights)
        # GPT-2 paper (Radford et al. 2019, section 2.3): scale residual-path weights by 1/sqrt(N),
        # N = number of residual layers = 2 per block (attention and MLP), as in nanoGPT.
        resid_std = INIT_STD / math.sqrt(2 * config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=resid_std)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)

    @property
    def block_size(self) -> int:
        """Longest context the model accepts (generation crops to it)."""
        return self.config.block_size

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        *,
        last_only: bool = False,
        kv_cache: AnyKVCache | None = None,
        pos: Position = 0,
    ) -> tuple[Tensor | None, Tensor | None]:
        """Logits for every position (or the last only) and, with targets, the mean loss.

        idx: (B, T) int64 token ids, T <= block_size. targets: (B, T) int64, -1 = ignore.
        Returns logits (B, T, V), or (B, 1, V) with last_only, and a scalar loss or None.
        With targets the logits are detached (differentiate the loss); with the native loss
        (ops "gptstack" or naming "loss") and targets, logits is None: it never forms them.
        kv_cache / pos (used by decoding.py): idx holds positions [pos, pos + T); keys and values
        are written into / read from the cache. Raises ModelError on a bad shape or T.
        """
        if idx.dim() != 2:
            raise ModelError(f"idx must be (B, T) token ids, got shape {tuple(idx.shape)}")
        T = idx.size(1)
        if isinstance(pos, int) and pos + T > self.config.block_size:
            raise ModelError(
                f"input covers positions [{pos}, {pos + T}) but block_size is "
                f"{self.config.block_size}: crop the context to its last "
                f"{self.config.block_size - pos} tokens (generate() does this)"
            )
        if targets is not None and last_only:
            raise ModelError("last_only=True is for inference; a loss needs every position")
        positions = torch.arange(T, device=idx.device) + pos  # (T,)
        x = self.drop(self.wte(idx) + self.wpe(positions))  # (B, T, C) + (T, C) -> (B, T, C)
        if self.config.residual == "bf16" and _autocasts_to_bf16(x.device.type):
            x = x.to(torch.bfloat16)  # config.py: RESIDUAL_CHOICES
        for block in self.h:
            x = block(x, kv_cache, pos)
        return self.head(x, targets, last_only=last_only)

    def head(
        self, x: Tensor, targets: Tensor | None = None, *, last_only: bool = False
    ) -> tuple[Tensor | None, Tensor | None]:
        """ln_f, the tied LM head and the loss: x (B, T, C) -> logits (B, T or 1, V), loss.

        A method of its own so that regional compilation (compiling.py) can compile it apart
        from the blocks: it is where gpt2-124m spends its memory ((B*T) x V logits).
        """
        native = self.native
        if native.layernorm is None:
            x = self.ln_f(x)
        else:
            x = native.layernorm(x, *norm_params(self.ln_f, x), LAYER_NORM_EPS)
        if targets is not None and native.linear_cross_entropy is not None:
            # LM head + loss in chunks of rows (cuda_ops README)
            return None, native.linear_cross_entropy(x, self.lm_head.weight, targets)
        if last_only:
            x = x[:, -1:, :]  # (B, 1, C): only the next-token prediction goes through the head
        logits = self.lm_head(x)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1
            )
            # The loss carries the gradient; the logits come back detached. A compiled head is
            # one autograd function with both outputs, and its backward is handed a gradient for
            # every output that requires one: zeros for the logits, B x T x V of them written
            # and added in each step (1.65 GB at gpt2-124m's B=16: the trace's largest fill).
            logits = logits.detach()
        return logits, loss

    def set_attention_backend(self, name: str) -> None:
        """Switch every layer to another registered attention backend (same weights)."""
        get_attention_backend(name)  # raises ModelError if unknown
        self.config.attention = name
        for block in self.h:
            block.attn.backend = name

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count (tied weights once). non_embedding drops `wpe` (a lookup, no FLOPs);
        `wte` stays because it is also the LM head's matmul weight (nanoGPT's convention)."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.wpe.weight.numel()
        return n

    def flops_per_token(self, seq_len: int | None = None) -> int:
        """Training FLOPs per token (forward + backward) at context seq_len (default block_size).

        PaLM (Chowdhery et al. 2022), appendix B: 6·N for the matmuls with weights (2 forward,
        4 backward per parameter per token) plus 12·L·C·T for attention scores and the weighted
        sum of values, counted without the causal saving. N = num_params(non_embedding=True),
        which also counts biases and LayerNorm gains (a few ‰ over the pure matmul count).
        MFU = flops_per_token · tokens/s / peak FLOP/s (name the peak you use).
        """
        T = self.config.block_size if seq_len is None else seq_len
        L, C = self.config.n_layer, self.config.n_embd
        return 6 * self.num_params(non_embedding=True) + 12 * L * C * T

    def configure_optimizer(
        self,
        weight_decay: float,
        learning_rate: float,
        betas: tuple[float, float],
        device_type: str,
        *,
        capturable: bool = False,
        fused: bool | None = None,
    ) -> torch.optim.AdamW:
        """AdamW: decay on Linear weights only (not biases, LayerNorms, wte/lm_head, wpe);
        fused on CUDA and CPUs (or as `fused` says); capturable for CUDA graphs.
        See optimizer.py."""
        return configure_adamw(
            self,
            weight_decay,
            learning_rate,
            betas,
            device_type,
            capturable=capturable,
            fused=fused,
        )
