"""Drafter training and data generation as jobs: their logs turned into curves and the accept
length they predict, their checkpoints inspected as they are written."""

# What another area may import from here (tests/test_core_layers.py holds every area to it).
PUBLIC = ("methods", "stepstore")  # stepstore: the steps as logged, which the report reads
