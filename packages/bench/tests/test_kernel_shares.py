"""gptstack.bench.kernel_shares: the kind of each kernel of a profiled step, and the shares."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gptstack.bench.kernel_shares import KINDS, kernel_kind, kernel_shares, shares_line

# names as they appear in the recorded profiles (benchmarks/profiles/profile-step-*.json)
NAMES = [
    ("nvjet_sm90_tst_192x192_64x3_2x1_v_bz_coopB_splitK_NNN", "matmul"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>", "matmul"),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_tn_align1>", "matmul"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64", "attention"),
    ("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*)", "attention"),
    ("void gs::attn::attention_forward_mma_kernel<32, 4, false>", "attention"),
    ("triton_per_fused__to_copy_add_native_layer_norm_native_layer_norm_backward_view_10",
     "layernorm"),
    # the embedding's and last LayerNorm's backward fused with the loss's forward: LayerNorm work
    ("triton_per_fused__to_copy_add_embedding_dense_backward_native_layer_norm_native_layer_norm_"
     "backward_nll_loss_forward_view_16", "layernorm"),
    ("triton_poi_fused_gelu_gelu_backward_view_4", "gelu"),
    ("triton_red_fused__log_softmax__log_softmax_backward_data__to_copy_nll_loss_backward", "loss"),
    ("void gs::(anonymous namespace)::cross_entropy_staged_kernel<__nv_bfloat16, 512>", "loss"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedOptimizerTensorList"
     "Metadata<4>, FusedAdamMathFunctor<float, 4>>", "optimizer"),
    ("triton_poi_fused_cat_transpose_view_8", "other"),
    ("Memset (Unknown)", "other"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "kind"), NAMES)
def test_each_kernel_gets_its_kind(name, kind):
    assert kernel_kind(name) == kind


rows = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from([n for n, _ in NAMES]),
            "gpu_us_per_step": st.floats(0, 1e6, allow_nan=False),
        }
    ),
    max_size=30,
)


@given(rows)
def test_shares_add_up_per_kind(rs):
    shares = kernel_shares(rs)
    assert set(shares) == set(KINDS)
    total = sum(r["gpu_us_per_step"] for r in rs)
    for kind in KINDS:
        want = sum(r["gpu_us_per_step"] for r in rs if kernel_kind(r["name"]) == kind)
        assert math.isclose(shares[kind]["us"], want, rel_tol=1e-9, abs_tol=1e-9)
    fractions = sum(v["fraction"] for v in shares.values())
    assert math.isclose(fractions, 1.0, rel_tol=1e-9) if total > 0 else fractions == 0


def test_the_line_puts_the_largest_first_and_leaves_out_empty_kinds():
    shares = kernel_shares(
        [
            {"name": "triton_poi_fused_gelu_view_9", "gpu_us_per_step": 10.0},
            {"name": "nvjet_sm90_tst_256x128", "gpu_us_per_step": 30.0},
        ]
    )
    assert shares_line(shares) == "matmul 75.0 %, gelu 25.0 %"


def test_a_negative_time_is_refused_with_the_kernel_named():
    with pytest.raises(ValueError, match="'nvjet_x' has a negative time"):
        kernel_shares([{"name": "nvjet_x", "gpu_us_per_step": -1.0}])
