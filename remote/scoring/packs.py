"""Samples laid end to end for one pass of the draft chain on the device: a few large batched
operations per pack instead of a few dozen small ones per sample (on a GPU the per-operation cost
of a small sample is its whole cost). The index arrays are built once per pack on the CPU, where
their bounds are plain integers (slicing by them never waits on the device), then moved over:
- the drafter's context rows: position i of a sample of L tokens (i < L-1) holds (token i+1, the
  target's states at i), with its place in the sample (RoPE) and the first row of its sample
  (attention never crosses into another sample);
- the anchors: a scored position a (scored[a+1]) with a + K <= L-1, so every step's target choice
  is in the data;
- the pairs (choice at i, token at i+1) within a sample, for the tokens off the target's path.
A pack holds at most PACK_BYTES of states (a larger sample goes alone) and PACK_SAMPLES samples:
memory is bounded by the pack, never by the data's size.
"""

PACK_BYTES = 2 * 1024 * 1024  # measured on the CPU: as fast as 8 MiB, 45 MiB less peak memory
PACK_SAMPLES = 256
QUERY_CHUNK = 256  # context rows attended at once (an [heads, 256, keys] score block)
ANCHOR_CHUNK = 256  # chains run together through their K steps


def _chunks(torch, count, size, first_key, last_key):
    """[(start, end, key_start, key_end)] of rows 0..count in chunks of `size`, with the key range
    each chunk attends to (from its first row's sample start to its last row's own key)."""
    out = []
    for start in range(0, count, size):
        end = min(count, start + size)
        out.append((start, end, int(first_key[start]), int(last_key[end - 1]) + 1))
    return out


class Pack(object):
    """Index arrays of samples of `lengths` tokens laid end to end (`scored`: their loss masks,
    concatenated, a CPU bool tensor), for chains of K drafts, moved to `device`."""

    def __init__(self, torch, lengths, scored, k, device):
        self.samples = len(lengths)
        self.tokens = int(sum(lengths))
        counts = torch.tensor(lengths, dtype=torch.long)
        starts = torch.cumsum(counts, 0) - counts
        sample_of = torch.repeat_interleave(torch.arange(self.samples), counts)
        local = torch.arange(self.tokens) - starts[sample_of]
        length_of = counts[sample_of]
        # Context rows and the first row of each sample among them.
        rows = torch.nonzero(local < length_of - 1).reshape(-1)
        row_counts = (counts - 1).clamp(min=0)
        row_starts = torch.cumsum(row_counts, 0) - row_counts
        row_index = torch.full((self.tokens,), -1, dtype=torch.long)
        row_index[rows] = torch.arange(rows.shape[0])
        row_lo = row_starts[sample_of[rows]]
        # Anchors: scored, and room for K steps within the sample.
        room = local <= length_of - 1 - k
        follows = torch.zeros(self.tokens, dtype=torch.bool)
        follows[:-1] = scored[1:]
        anchors = torch.nonzero(room & follows).reshape(-1)
        anchor_rows = row_index[anchors]
        anchor_lo = row_lo[anchor_rows] if anchors.shape[0] else anchor_rows
        self.context_chunks = _chunks(torch, rows.shape[0], QUERY_CHUNK, row_lo, torch.arange(rows.shape[0]))
        self.anchor_chunks = _chunks(torch, anchors.shape[0], ANCHOR_CHUNK, anchor_lo, anchor_rows)
        # Pairs (i, i+1) within one sample whose later token is scored.
        pairs = (local[1:] >= 1) & scored[1:] if self.tokens > 1 else torch.zeros(0, dtype=torch.bool)
        put = (lambda t: t.to(device)) if device != "cpu" else (lambda t: t)
        self.rows, self.row_positions, self.row_lo = put(rows), put(local[rows]), put(row_lo)
        self.row_self = put(torch.arange(rows.shape[0]))
        self.anchors, self.anchor_rows, self.anchor_lo = put(anchors), put(anchor_rows), put(anchor_lo)
        self.anchor_positions = put(local[anchors])
        self.pairs, self.pair_sample = put(pairs), put(sample_of[1:])
        self.device = device
