"""Each suite at smoke size on the CPU writes a result that passes the schema and says what it
skipped. No timing assertions: only structure, checks and notes."""

import importlib.util

import pytest
import torch

from gptstack.bench import (
    RUNG_KEYS,
    RUNGS,
    BenchError,
    ModelShape,
    SuiteOptions,
    add_candidate,
    get_op,
    load_result,
    register_op,
    registered_ops,
    run_ops,
)
from gptstack.bench.suites.train import BASELINE, TRAIN_DEFAULT

pytestmark = pytest.mark.slow  # the session fixture runs every suite once (~40 s on 2 cores)


def rows(data, section=None, status=None):
    return [
        r
        for r in data["rows"]
        if (section is None or r["section"] == section)
        and (status is None or r["status"] == status)
    ]


def test_every_result_file_passes_the_schema(suite_results):
    for suite, path in suite_results.items():
        data = load_result(path)
        assert data["suite"] == suite and data["complete"]
        assert data["env"]["command"] == "pytest bench"
        assert data["params"]["smoke"] is True


def test_train_ladder_rows(suite_results):
    data = load_result(suite_results["train"])
    by_key = {r.key: r for r in RUNGS}
    keys = [r["key"] for r in data["params"]["rungs"]]  # the rungs the fixture asked for
    requested = [by_key[k] for k in RUNG_KEYS if k in keys]  # in ladder order
    assert requested[0].key == BASELINE and any(r.gpu_only for r in requested)
    for preset in ("esp32", "shakespeare-char"):
        ladder = [r for r in rows(data, "ladder") if r["group"] == preset]
        assert [r["name"] for r in ladder] == [rung.name for rung in requested]
        for r, rung in zip(ladder, requested):
            if rung.gpu_only:
                assert r["status"] == "skipped" and "GPU only" in r["note"]
                continue
            assert r["status"] == "ok"
            if rung.key == BASELINE:
                assert r["metrics"]["tokens_per_s"] > 0
                continue
            assert set(r["ratios"]) >= {"vs_previous", "vs_fp32"}
            assert r["ratios"]["vs_fp32"]["n"] == len(r["samples_s"])
            assert r["check"]["ok"], r["check"]
        assert data["summary"][preset]["train_default"] == by_key[TRAIN_DEFAULT].name
    assert "CUDA graph" in data["params"]["train_default"]["what"]


def test_generate_sections_and_checks(suite_results):
    data = load_result(suite_results["generate"])
    assert {r["section"] for r in data["rows"]} == {
        "decode",
        "sweep_prompt",
        "sweep_new",
        "threads",
    }
    for r in rows(data, status="ok"):
        if r["section"] == "threads":
            continue
        assert r["check"]["ok"], r
        assert r["metrics"]["bandwidth_bytes_per_s"] > 0
    skipped = rows(data, status="skipped")
    assert skipped and all("GPU only" in r["note"] for r in skipped)
    assert data["floors"]["copy"]["bytes_per_s"] > 0
    # the CLI's decoder with both steps runs (eagerly on a CPU) beside the others, and its
    # greedy text is naive's
    decode = rows(data, "decode", "ok")
    for name in ("graph decoder, PyTorch step", "graph decoder, gptstack kernels"):
        graph = [r for r in decode if r["name"] == name]
        assert graph and all(r["metrics"]["greedy_match"] == 1.0 for r in graph), name


@pytest.mark.parametrize("suite", ["generate", "train"])
def test_thread_rows_put_the_policy_beside_the_default(suite_results, suite, thread_policy):
    data = load_result(suite_results[suite])
    threads = [r for r in data["rows"] if r["section"] == "threads"]
    groups = {r["group"] for r in threads}
    assert groups and all(r["status"] == "ok" for r in threads)
    for group in groups:
        default, policy = [r for r in threads if r["group"] == group]
        assert (
            default["name"].startswith("PyTorch default") and "vs_default" not in default["ratios"]
        )
        assert policy["name"].startswith("thread policy")
        assert policy["ratios"]["vs_default"]["n"] == len(policy["samples_s"])
        assert default["params"]["threads"] == torch.get_num_threads()
        rows_per_call = (
            policy["params"]["batch"]
            if suite == "generate"
            else policy["params"]["batch"] * policy["params"]["seq_len"]
        )
        expected = thread_policy(rows_per_call, policy["params"]["n_params"])
        assert policy["params"]["threads"] == expected


def test_attention_op_and_model_rows(suite_results):
    data = load_result(suite_results["attention"])
    native_installed = importlib.util.find_spec("gptstack.cuda_ops") is not None
    for section in ("op", "op-train", "model"):  # op-train: forward + backward
        ok = rows(data, section, "ok")
        expected = {"per-head loop", "manual (batched heads)", "sdpa"}
        if native_installed:  # gptstack.cuda_ops registers the "gptstack" backend on import
            expected.add("native (cuda_ops)")
        assert {r["name"] for r in ok} == expected
        assert all(r["check"]["ok"] and r["check"]["rel_err"] < 1e-5 for r in ok)
        # the native row is measured and checked when gptstack.cuda_ops is installed, and
        # otherwise says why it is missing; either way there is exactly one per shape
        native = [r for r in rows(data, section) if r["name"] == "native (cuda_ops)"]
        assert native and all((r["status"] == "ok") == native_installed for r in native)
        assert all(r["note"] for r in native if r["status"] == "skipped")


def test_ops_rows_and_floors(suite_results):
    data = load_result(suite_results["ops"])
    ops = {r["params"]["op"] for r in rows(data, "ops", "ok")}
    assert ops >= {"layernorm", "gelu_tanh", "softmax", "attention_sdpa"}
    for r in rows(data, "ops", "ok"):
        assert r["check"]["ok"] and r["metrics"]["floor_fraction"] > 0
    assert data["floors"]["matmul"]["flops_per_s"] > 0
    # a forward+backward op also runs as a training step does (forward compiled alone, autograd
    # for the backward), checked like the others: every gradient and output against eager
    by_op = {}
    for r in rows(data, "ops", "ok"):
        by_op.setdefault(r["params"]["op"], set()).add(r["name"])
    fwd_bwd = [op for op in by_op if op.endswith("_fwd_bwd")]
    assert fwd_bwd and all("torch.compile (fwd, bwd)" in by_op[op] for op in fwd_bwd)
    assert all("torch.compile (fwd, bwd)" not in by_op[op] for op in by_op if op not in fwd_bwd)


def test_tokenizer_rows(suite_results):
    if "tokenizer" not in suite_results:
        pytest.skip("tinyshakespeare.txt not in $GPTSTACK_DATA_DIR")
    data = load_result(suite_results["tokenizer"])
    train = rows(data, "train", "ok")
    assert train and all(r["check"]["ok"] for r in train)
    encode = rows(data, "encode")
    assert len(encode) == 4
    assert all(r["check"]["ok"] for r in encode if r["status"] == "ok")


def test_a_registered_candidate_is_timed_and_checked(tmp_path, bench_settings):
    op = get_op("gelu_tanh")
    register_op(
        "bench_test_double",
        lambda x: 2 * x,
        make_inputs=op.make_inputs,
        bytes_moved=op.bytes_moved,
        flops=lambda i: i[0].numel(),
        replace=True,
    )
    add_candidate("bench_test_double", "right", lambda x: x + x)
    add_candidate("bench_test_double", "wrong", lambda x: x * 2.001)
    with pytest.raises(BenchError, match="already has"):
        add_candidate("bench_test_double", "eager", torch.neg)
    with pytest.raises(BenchError, match="already has"):
        add_candidate("bench_test_double", "torch.compile (fwd, bwd)", torch.neg)
    shape = ModelShape("tiny", 64, 16, 1, 2, 16, batch_size=2)
    data = run_ops(
        [shape],
        ops=["bench_test_double"],
        options=SuiteOptions(
            device="cpu",
            compile_backend="eager",
            settings=bench_settings,
            progress=False,
            out=tmp_path / "ops.json",
        ),
    )
    by_name = {r["name"]: r for r in data["rows"]}
    assert set(by_name) == {"eager", "torch.compile", "right", "wrong"}
    assert by_name["right"]["check"]["ok"] and not by_name["wrong"]["check"]["ok"]
    assert set(by_name["right"]["ratios"]) == {"vs_eager", "vs_compile"}
    assert set(by_name["torch.compile"]["ratios"]) == {"vs_eager"}
    assert by_name["eager"]["ratios"] == {}
    assert "bench_test_double" in registered_ops()
    with pytest.raises(BenchError, match="already registered"):
        register_op(
            "bench_test_double",
            torch.neg,
            make_inputs=op.make_inputs,
            bytes_moved=op.bytes_moved,
            flops=op.flops,
        )


def test_the_distill_rung_trains_towards_the_teacher():
    """The distill rung's step is Distillation(student, teacher): its first loss is the
    objective on the shared initial weights (on a CPU: fp32, no graph, no compile)."""
    import dataclasses

    from gptstack.bench import ModelShape
    from gptstack.bench.suites.train import _BY_KEY, DISTILL_WEIGHT, RungStep
    from gptstack.model import distillation_loss

    rung = dataclasses.replace(
        _BY_KEY["distill"], dtype="fp32", compile=None, step_graph=False, gpu_only=False
    )
    teacher_shape = ModelShape("t", 64, 16, 2, 2, 48)
    shape = ModelShape("s", 64, 16, 2, 2, 32, batch_size=3, teacher=teacher_shape)
    assert shape.smoke().teacher == teacher_shape.smoke()
    base, teacher = (
        shape.build(torch.device("cpu")),
        teacher_shape.build(torch.device("cpu"), seed=1),
    )
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, 64, (3, 16), generator=g) for _ in range(2))
    with torch.no_grad():
        expected = distillation_loss(base(x)[0], teacher(x)[0], y, weight=DISTILL_WEIGHT)
        plain = torch.nn.functional.cross_entropy(base(x)[0].reshape(-1, 64), y.reshape(-1))
    step = RungStep(rung, base, torch.device("cpu"), "inductor", teacher)
    step.first_steps([(x, y)])
    assert step.first_loss == pytest.approx(expected.item(), rel=1e-5)
    assert abs(step.first_loss - plain.item()) > 1e-3  # the teacher's term is in it
