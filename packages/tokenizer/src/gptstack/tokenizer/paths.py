"""Where gptstack keeps downloaded data (corpora, GPT-2 ranks)."""

from __future__ import annotations

import os
from pathlib import Path

DATA_DIR_ENV = "GPTSTACK_DATA_DIR"


def default_data_dir() -> Path:
    """`$GPTSTACK_DATA_DIR` when set (and non-empty), else `~/.cache/gptstack/data`.

    The folder may not exist yet; callers that write create it.
    """
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "gptstack" / "data"
