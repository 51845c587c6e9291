"""The C heap for work that makes and drops many large strings: a MoE target's listing reads 64
shard headers of ~300 KB, each cut into strings of about that size several times over.

glibc's malloc gives each block over its mmap threshold (128 KiB at first) a mapping of its own
and returns it to the system when freed, so every such string was mapped and faulted in afresh:
~30,000 page faults, ~70 ms of a cold listing's ~300 ms. Freeing one mapped block raises the
threshold to that block's size (mallopt(3), "dynamic mmap threshold"). So one 16 MiB block is
asked for and let go at once: bytes(n) is calloc'd, and calloc leaves a fresh mapping's pages
untouched. The large strings after it come from the heap, reused from shard to shard. Elsewhere
than glibc, this costs one allocation and does nothing. Standard library only.
"""

_raised = False


def keep_large_blocks(size=16 << 20):
    """Once per process: let glibc serve blocks up to `size` bytes from its heap."""
    global _raised
    if not _raised:
        block = bytes(size)  # calloc'd: a fresh mapping whose pages are never touched
        del block  # freed: the mapping goes back, the raised threshold stays
        _raised = True
