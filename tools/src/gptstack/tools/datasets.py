"""Named corpora: where they come from, their checksum, and where they are cached.

A named dataset is looked up in the data directory (`$GPTSTACK_DATA_DIR`, default
`~/.cache/gptstack/data`); a file there with the right SHA-256 is used without any network.
Otherwise it is downloaded from its canonical URL, verified, and written atomically.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from gptstack.tokenizer import atomic_path, default_data_dir

from .errors import DataError


@dataclass(frozen=True)
class Dataset:
    name: str
    filename: str
    url: str
    sha256: str
    nbytes: int


# The one table of dataset URLs and checksums.
DATASETS: dict[str, Dataset] = {
    "tinyshakespeare": Dataset(
        name="tinyshakespeare",
        filename="tinyshakespeare.txt",
        url="https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",
        sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        nbytes=1115394,
    ),
}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download(ds: Dataset, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_path(dest) as tmp:
            with open(tmp, "wb") as out, urllib.request.urlopen(ds.url, timeout=60) as resp:
                while block := resp.read(1 << 16):
                    out.write(block)
            got = sha256_file(tmp)
            if got != ds.sha256:
                raise DataError(
                    f"downloaded {ds.name} from {ds.url} but its SHA-256 is {got}, expected "
                    f"{ds.sha256}: the file changed upstream or the download was corrupted"
                )
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        raise DataError(
            f"dataset {ds.name!r} is not in {dest.parent} and could not be downloaded from "
            f"{ds.url} ({e}). Put {ds.filename} (sha256 {ds.sha256}) in {dest.parent}, or set "
            "GPTSTACK_DATA_DIR to a folder that has it, or pass --data FILE"
        ) from None


def resolve_dataset(name: str, *, download: bool = True) -> Path:
    """Path of a named dataset's text file, downloading and verifying it if needed."""
    if name not in DATASETS:
        raise DataError(
            f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))} "
            "(or pass --data FILE for your own text)"
        )
    ds = DATASETS[name]
    path = default_data_dir() / ds.filename
    if path.is_file():
        got = sha256_file(path)
        if got == ds.sha256:
            return path
        raise DataError(
            f"{path} has SHA-256 {got}, expected {ds.sha256} for {name}: delete it to re-download"
        )
    if not download:
        raise DataError(f"dataset {name!r} not found at {path}")
    print(f"downloading {name} from {ds.url} -> {path}")
    _download(ds, path)
    return path


def read_corpus(path: Path) -> str:
    """The text of a corpus file: UTF-8, non-empty, or a DataError saying what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file {path} does not exist: pass --data with a UTF-8 text file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"data file {path} is not UTF-8 text ({e}): convert it to UTF-8") from None
    if not text.strip():
        raise DataError(f"data file {path} is empty: training needs some text")
    return text


def cache_dir() -> Path:
    """Where derived files (token memmaps) are cached: $GPTSTACK_CACHE_DIR or ~/.cache/gptstack."""
    env = os.environ.get("GPTSTACK_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "gptstack"
