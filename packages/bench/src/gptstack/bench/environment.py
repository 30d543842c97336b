"""What a result was measured on and with: machine, versions, code, command (docs/MEASURING.md
rule 6).

    env = environment(torch.device("cuda"), command=["gptstack", "bench", "train"])

The git commit comes from `git` in the checkout that holds this file; where the code was copied
without `.git` (the GPU machine), set GPTSTACK_GIT_COMMIT (and GPTSTACK_GIT_DIRTY=1 if the copy
has uncommitted changes). `source_sha256` hashes every Python source file of the gptstack
packages, so two results from identical code can be recognised even without git.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

# Environment variables that change what a benchmark measures; recorded when set.
RECORDED_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TORCHINDUCTOR_CACHE_DIR",
    "TORCHINDUCTOR_COMPILE_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF",
    "GPTSTACK_DATA_DIR",
    "GPTSTACK_CUDA_OPS_SWITCHES",  # benchmarks/switches/sitecustomize.py's kernel switches
    "TORCHINDUCTOR_ENABLE_PDL",
)


def repo_root() -> Path | None:
    """The gptstack checkout that holds this file (the folder with packages/ and tools/)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "packages").is_dir() and (parent / "tools").is_dir():
            return parent
    return None


def _git(root: Path, *args: str) -> str | None:
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_state() -> dict[str, Any]:
    """{"commit", "dirty", "source"}: from GPTSTACK_GIT_COMMIT/_DIRTY, else git, else unknown."""
    env_commit = os.environ.get("GPTSTACK_GIT_COMMIT")
    if env_commit:
        return {
            "commit": env_commit,
            "dirty": os.environ.get("GPTSTACK_GIT_DIRTY", "") == "1",
            "source": "GPTSTACK_GIT_COMMIT",
        }
    root = repo_root()
    commit = _git(root, "rev-parse", "HEAD") if root else None
    if commit is None:
        return {"commit": None, "dirty": None, "source": "unknown (no git checkout)"}
    status = _git(root, "status", "--porcelain") or ""
    return {"commit": commit, "dirty": bool(status), "source": "git"}


def source_sha256() -> str | None:
    """SHA-256 over (path, bytes) of every .py file under packages/*/src and tools/src."""
    root = repo_root()
    if root is None:
        return None
    files = sorted([*root.glob("packages/*/src/**/*.py"), *root.glob("tools/src/**/*.py")])
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = proc.stdout.strip().splitlines()
    return lines[0].strip() if proc.returncode == 0 and lines else None


def device_info(device: torch.device) -> dict[str, Any]:
    """Name and properties of the device the suite runs on."""
    if device.type != "cuda":
        return {"type": "cpu", "name": cpu_model()}
    props = torch.cuda.get_device_properties(device)
    return {
        "type": "cuda",
        "name": torch.cuda.get_device_name(device),
        "capability": f"{props.major}.{props.minor}",
        "memory_bytes": props.total_memory,
        "multiprocessors": props.multi_processor_count,
        "driver": _nvidia_driver(),
        "count": torch.cuda.device_count(),
    }


def device_slug(device: torch.device) -> str:
    """A short file-name word for the device: 'cpu', 'h200', 'a100', ..."""
    if device.type != "cuda":
        return "cpu"
    words = torch.cuda.get_device_name(device).lower().replace("nvidia", "").split()
    return (words[0] if words else "gpu").replace("/", "-")


def command_line(argv: list[str] | None) -> str:
    return shlex.join(argv if argv is not None else sys.argv)


def threads_available() -> int:
    """CPU threads this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def environment(device: torch.device, command: list[str] | None = None) -> dict[str, Any]:
    """Everything docs/MEASURING.md rule 6 asks for, as one JSON-ready dict."""
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(command),
        "git": git_state(),
        "source_sha256": source_sha256(),
        "device": device_info(device),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "numpy": _version("numpy"),
        "platform": platform.platform(),
        "cpu": {
            "model": cpu_model(),
            "threads_available": threads_available(),
            "torch_threads": torch.get_num_threads(),
            "load_average_1_5_15": load,
        },
        "env": {k: os.environ[k] for k in RECORDED_ENV if k in os.environ},
        "cuda_ops_switches": cuda_ops_switches(),
    }


def cuda_ops_switches() -> dict[str, Any] | None:
    """The state of gptstack.cuda_ops' kernel switches where it is installed (programmatic
    launch, the staged loss kernel, ...), so that a record says which kernels its run used;
    None without it (the bench does not depend on it)."""
    try:
        from gptstack.cuda_ops import switches
    except ImportError:
        return None
    return switches()


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:
        return None
