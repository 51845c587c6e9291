"""Slurm on the host: jobs submitted through Slurm and watched from its own commands (engine.py,
record.py, watcher.py, methods.py), and the user's other Slurm jobs beside ours."""
