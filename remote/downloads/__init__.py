"""Downloads from the hub onto the host as jobs: planned, transferred, verified."""

# What another area may import from here (tests/test_core_layers.py holds every area to it).
PUBLIC = ("output",)
