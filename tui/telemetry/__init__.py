"""The host's GPUs, CPU, memory and disks (remote/telemetry): the GPUs pane and its text rows, `specdeck gpus`,
and how each figure reads (model.py)."""
