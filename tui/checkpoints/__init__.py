"""Safetensors checkpoints (remote/checkpoints): the Tensors pane, `specdeck inspect` and `compare`,
the compare screen, and their plain-text rendering (view.py), the EAGLE-3 summary, the problems
found and the tensor table."""
