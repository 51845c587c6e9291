"""The history store: every sampler's points in SQLite under the state directory, rolled up into
10 s and 1 min tiers and bounded in size; the daemon's `daemon.history`. Other areas record into
it through the daemon and read it through `call.history()` (remote/core/wire.py)."""

# What another area may import from here (tests/test_core_layers.py holds every area to it).
PUBLIC = ("query",)
