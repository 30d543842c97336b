"""PCG32 (O'Neill's pcg32_random_r, XSH-RR, 64-bit state), exactly as FORMAT.md section 9.

    rng = Pcg32(seed); rng.next_u32(); rng.uniform()

Seeded like O'Neill's pcg32_srandom_r(seed, PCG_STREAM), so the C engine and this class give the
same stream for the same u64 seed. https://www.pcg-random.org, github.com/imneme/pcg-c-basic.
"""

from __future__ import annotations

import numpy as np

_MASK64 = (1 << 64) - 1
_MULTIPLIER = 6364136223846793005
# The stream selector of FORMAT.md section 9 (the increment of O'Neill's PCG32_INITIALIZER).
PCG_STREAM = 0xDA3E39CB94B95BDB


class Pcg32:
    """PCG32 generator: `next_u32()` → int in [0, 2^32), `uniform()` → float32 in [0, 1).

    seed: any u64; stream: the sequence selector (FORMAT.md fixes PCG_STREAM; another value is
    only for checking against O'Neill's published outputs).
    """

    def __init__(self, seed: int, *, stream: int = PCG_STREAM) -> None:
        self.state = 0
        self.inc = ((stream << 1) | 1) & _MASK64
        self.next_u32()
        self.state = (self.state + (seed & _MASK64)) & _MASK64
        self.next_u32()

    def next_u32(self) -> int:
        old = self.state
        self.state = (old * _MULTIPLIER + self.inc) & _MASK64
        x = (((old >> 18) ^ old) >> 27) & 0xFFFFFFFF
        r = old >> 59
        return ((x >> r) | (x << ((-r) & 31))) & 0xFFFFFFFF

    def uniform(self) -> np.float32:
        """(f32)(next() >> 8) * 2^-24: 24 random bits, exact in float32."""
        return np.float32(self.next_u32() >> 8) * np.float32(2.0**-24)
