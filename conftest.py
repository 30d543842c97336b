"""Root pytest configuration shared by every member's tests.

Points GPTSTACK_DATA_DIR at ../shared/data (Tiny Shakespeare, GPT-2 ranks) when that folder
exists and the variable is unset, so tests never touch the network.
"""

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

if "GPTSTACK_DATA_DIR" not in os.environ and SHARED_DATA.is_dir():
    os.environ["GPTSTACK_DATA_DIR"] = str(SHARED_DATA)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The folder holding tinyshakespeare.txt and gpt2.tiktoken for tests."""
    path = Path(os.environ.get("GPTSTACK_DATA_DIR", SHARED_DATA))
    if not (path / "tinyshakespeare.txt").is_file():
        pytest.fail(
            f"test data not found in {path}: set GPTSTACK_DATA_DIR to a folder holding "
            "tinyshakespeare.txt and gpt2.tiktoken (see ../shared/data/README.md)"
        )
    return path


@pytest.fixture(scope="session")
def shakespeare_text(data_dir: Path) -> str:
    return (data_dir / "tinyshakespeare.txt").read_text(encoding="utf-8")
