"""Scoring a drafter before serving it: a job under the host's ML interpreter runs the EAGLE-3
draft chain over hidden states the target already produced (a trainer's data) and predicts the
accept length serving would see, per position; its result is kept as a speculation profile."""

# What another area may import from here (tests/test_core_layers.py holds every area to it).
PUBLIC = ("profile", "methods")  # methods.submit: a training run scores its checkpoints
