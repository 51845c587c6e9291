"""Checkpoints on the host: safetensors listings with each tensor's role, comparisons, verdicts, vocabulary coverage."""

# What another area may import from here (tests/test_core_layers.py holds every area to it).
PUBLIC = ("compatibility", "report", "verdicts", "formats", "eagle3", "locate", "safetensors_header")
