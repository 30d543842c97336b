"""Sampling defaults: one object for every command that writes text.

`gptstack sample`, `gptstack eval`'s samples, the pipeline, `gptstack firmware run` and the board
(`firmware/esp32/src/main.cpp`, `GS_TEMPERATURE` / `GS_TOP_K`, checked against this object by
`firmware/esp32/host/tests/test_platformio.py`) all start from these values.

temperature 0.8 and top-k: nanoGPT's `sample.py` uses 0.8 / 200; with 65-character and 512-token
vocabularies a top-k of 200 keeps nearly every token, so the project keeps the 40 the board has
always used, which drops the long tail a small model puts too much mass on. The C engine has no
top-p, so the default leaves it off everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingDefaults:
    temperature: float = 0.8
    top_k: int | None = 40  # None: no top-k
    top_p: float | None = None  # None: no nucleus cut (PyTorch decoders only)
    seed: int = 1  # for reproducible samples in eval, the pipeline and `firmware run`


SAMPLING = SamplingDefaults()


def add_sampling_arguments(parser) -> None:
    """--temperature and --top-k with these defaults, for every command that writes text."""
    parser.add_argument(
        "--temperature",
        type=float,
        default=SAMPLING.temperature,
        help="softmax temperature, 0 = greedy (default %(default)s)",
    )
    parser.add_argument(
        "--top-k",
        type=int,
        default=SAMPLING.top_k,
        help="keep the k most likely tokens, 0 = all of them (default %(default)s)",
    )
