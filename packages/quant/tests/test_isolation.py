"""gptstack.quant runs without torch: read, reference, sampling, eval and quantizing."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_package_never_imports_torch(tmp_path):
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np
        from safetensors.numpy import save_file
        import gptstack.quant as q
        tables = q.synthetic_tables("bpe", 300, seed=0)
        spec = q.ModelSpec(300, 8, 1, 2, 16, bias=True, bos_token=299)
        ckpt = {str(tmp_path)!r}
        json.dump({{"model": dict(vocab_size=300, block_size=8, n_layer=1, n_head=2, n_embd=16,
                                  bias=True)}}, open(ckpt + "/config.json", "w"))
        save_file(q.synthetic_weights(spec), ckpt + "/model.safetensors")
        spec, tensors = q.quantize_checkpoint(ckpt, tables, bos_token=299)
        art = q.read_artifact(q.write_artifact(ckpt + "/m.gsm", spec, tables, tensors))
        q.forward_sequence(art, np.arange(8)[None])
        q.generate(art, q.PromptEncoder(tables).encode("hi"), 12, 0.8, 5, seed=1)
        q.evaluate_loss(art, np.arange(20))
        q.check_fits(q.memory_plan(art))
        assert "torch" not in sys.modules, "gptstack.quant imported torch"
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
