"""specdeck's host side: the agent, the per-user daemon and the jobs it runs.

This package is shipped to the GPU host as one zipapp and runs on the host's own
Python (3.9+). Its core uses the standard library only; optional powers
(huggingface_hub, safetensors, NVML) are discovered at run time.
"""

AGENT_VERSION = "0.1.0"
PROTOCOL_VERSION = 1
