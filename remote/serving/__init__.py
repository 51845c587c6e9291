"""Inference servers with a drafter: start them as jobs (vLLM, SGLang, or a baseline without a
drafter), read their speculative-decoding metrics every second into the history store and a
stream, and judge the drafter against the break-even accept length (an A/B benchmark job
measures what that needs)."""

# What another area may import from here (tests/test_core_layers.py holds every area to it).
PUBLIC = ("bench", "engines", "root_cause", "baselines", "break_even_store")
