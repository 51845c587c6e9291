"""Drafter training and data generation as jobs: their logs turned into curves and the accept
length they predict, their checkpoints inspected as they are written."""
