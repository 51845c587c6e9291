"""The EAGLE-3 draft chain, run greedily over one sample's recorded target states as vLLM's
drafter runs it (model_executor/models/llama_eagle3.py):
- fc fuses the aux states [aux x H_target -> H] (after input_norm / fc_norm where the config asks);
- the first decoder layer's attention takes cat(input_layernorm(embed(token)), hidden_norm(h)), 2H
  wide (the residual taken before hidden_norm unless norm_before_residual); later layers take H;
- the drafter's own norm, then lm_head over the draft vocabulary; a draft id becomes a target id
  through d2t (target = draft + d2t[draft]); the next step's hidden is the layer output before
  the norm (after it, with norm_output);
- position i of the drafter's context holds (token i+1, the target's aux states at i); the draft
  steps from anchor a sit at positions a+1, a+2, ... and attend to the context up to a and to
  the chain's own earlier steps.
Draft k from anchor a is compared with the target's own greedy choice T[a+k] (its lm_head over
the final norm of its last-layer state at a+k). The chain goes on while every draft was accepted
and the recorded tokens follow the target's choices (x[a+k] == T[a+k-1]): beyond that, serving
would have put the target's token where the data has another, and the target's next choice is not
in the data (counted as a cut chain: the figure is then a lower bound).

Several samples run as one pack (packs.Pack): a row attends only to its own sample's rows.
Runs under the ML interpreter: the caller passes the torch module in.
"""

import math



def rms_norm(torch, x, weight, eps):
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return x32.to(x.dtype) * weight


def _inv_freq(torch, spec, device):
    dim = spec["head_dim"]
    inv = 1.0 / (spec["rope_theta"] ** (torch.arange(0, dim, 2, device=device, dtype=torch.float64) / dim))
    rope = spec["rope"]
    if rope.get("rope_type") == "linear":
        inv = inv / float(rope.get("factor", 1.0))
    elif rope.get("rope_type") == "llama3":
        factor, low, high = float(rope["factor"]), float(rope.get("low_freq_factor", 1.0)), float(rope.get("high_freq_factor", 4.0))
        old = float(rope.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old / low, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old / high) & (wavelen <= old / low)
        inv = torch.where(medium, smoothed, scaled)
    return inv.float()


class Drafter(object):
    """One drafter's weights on a device, and its forward pass."""

    def __init__(self, torch, spec, weights, embed, d2t, device):
        self.torch, self.spec, self.w, self.embed, self.device = torch, spec, weights, embed, device
        self.eps = spec["rms_norm_eps"]
        self.heads, self.kv_heads, self.head_dim = spec["heads"], spec["kv_heads"], spec["head_dim"]
        self.inv_freq = _inv_freq(torch, spec, device)
        draft_ids = torch.arange(spec["draft_vocab_size"], device=device)
        self.to_target = draft_ids + d2t.to(device) if d2t is not None else draft_ids

    # ------------------------------------------------------------------ pieces
    def _rope(self, x, positions):
        torch = self.torch
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        cos, sin = emb.cos()[:, None, :].to(x.dtype), emb.sin()[:, None, :].to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def fuse(self, aux):
        """fc over the aux states [n, aux x H_target] -> [n, H]."""
        torch, names = self.torch, self.spec["names"]
        if names.get("input_norm"):
            aux = rms_norm(torch, aux, self.w[names["input_norm"]], self.eps)
        if names.get("fc_norm"):
            chunks = aux.chunk(len(names["fc_norm"]), dim=-1)
            aux = torch.cat([rms_norm(torch, c, self.w[n], self.eps) for c, n in zip(chunks, names["fc_norm"])], dim=-1)
        return aux @ self.w[names["fc"]].T

    def _qkv(self, layer, x, positions):
        names = self.spec["names"]["layers"][layer]
        n = x.shape[0]
        q = (x @ self.w[names["self_attn.q_proj.weight"]].T).view(n, self.heads, self.head_dim)
        k = (x @ self.w[names["self_attn.k_proj.weight"]].T).view(n, self.kv_heads, self.head_dim)
        v = (x @ self.w[names["self_attn.v_proj.weight"]].T).view(n, self.kv_heads, self.head_dim)
        return self._rope(q, positions), self._rope(k, positions), v

    def _attend(self, q, context_k, context_v, key_start, limit, lo, own_k=None, own_v=None):
        """Attention of queries q [B, heads, d] over the context keys key_start + 0.. (a slice of
        the pack's keys) of which query b sees lo[b]..limit[b] (its own sample, up to its own
        row) and, for each query, its own chain's keys own_k [B, s, kv_heads, d]."""
        torch = self.torch
        group = self.heads // self.kv_heads
        scale = 1.0 / math.sqrt(self.head_dim)
        ck = context_k.repeat_interleave(group, dim=1) if group > 1 else context_k
        cv = context_v.repeat_interleave(group, dim=1) if group > 1 else context_v
        scores = torch.einsum("bhd,phd->bhp", q.float(), ck.float()) * scale
        keys = torch.arange(key_start, key_start + ck.shape[0], device=q.device)[None, :]
        beyond = (keys > limit[:, None]) | (keys < lo[:, None])
        scores = scores.masked_fill(beyond[:, None, :], float("-inf"))
        if own_k is not None:
            ok = own_k.repeat_interleave(group, dim=2) if group > 1 else own_k
            ov = own_v.repeat_interleave(group, dim=2) if group > 1 else own_v
            own = torch.einsum("bhd,bshd->bhs", q.float(), ok.float()) * scale
            weights = torch.softmax(torch.cat([scores, own], dim=-1), dim=-1)
            out = torch.einsum("bhp,phd->bhd", weights[..., :ck.shape[0]], cv.float()) \
                + torch.einsum("bhs,bshd->bhd", weights[..., ck.shape[0]:], ov.float())
        else:
            weights = torch.softmax(scores, dim=-1)
            out = torch.einsum("bhp,phd->bhd", weights, cv.float())
        return out.to(q.dtype).reshape(q.shape[0], self.heads * self.head_dim)

    def _mlp(self, layer, x):
        names = self.spec["names"]["layers"][layer]
        gate = x @ self.w[names["mlp.gate_proj.weight"]].T
        up = x @ self.w[names["mlp.up_proj.weight"]].T
        return (self.torch.nn.functional.silu(gate) * up) @ self.w[names["mlp.down_proj.weight"]].T

    def _layer_input(self, layer, embeds, hidden, residual):
        """(attention input, residual) of a decoder layer."""
        torch, names = self.torch, self.spec["names"]
        lw = names["layers"][layer]
        if layer == 0:
            e = rms_norm(torch, embeds, self.w[lw["input_layernorm.weight"]], self.eps)
            if self.spec["norm_before_residual"]:
                h = rms_norm(torch, hidden, self.w[names["hidden_norm"]], self.eps)
                residual = h
            else:
                residual = hidden
                h = rms_norm(torch, hidden, self.w[names["hidden_norm"]], self.eps)
            return torch.cat([e, h], dim=-1), residual
        residual = hidden + residual
        return rms_norm(torch, residual, self.w[lw["input_layernorm.weight"]], self.eps), residual

    def _after_attention(self, layer, attn, residual):
        lw = self.spec["names"]["layers"][layer]
        attn = attn @ self.w[lw["self_attn.o_proj.weight"]].T
        residual = attn + residual
        x = rms_norm(self.torch, residual, self.w[lw["post_attention_layernorm.weight"]], self.eps)
        return self._mlp(layer, x), residual

    def _head(self, hidden, residual):
        """(draft target ids, the next step's hidden) from the last layer's output."""
        prenorm = hidden + residual
        normed = rms_norm(self.torch, prenorm, self.w[self.spec["names"]["norm"]], self.eps)
        draft = (normed @ self.w[self.spec["names"]["lm_head"]].T).argmax(dim=-1)
        return self.to_target[draft], (normed if self.spec["norm_output"] else prenorm)

    # ------------------------------------------------------------------ passes
    def context(self, pack, tokens, fused):
        """The drafter's pass over a pack's context rows (packs.Pack): row i of a sample takes
        (tokens[i+1], fused[i]). Returns (first draft of each row as target ids, next hidden
        [rows, H], the K/V of every layer at every row)."""
        torch = self.torch
        embeds = self.embed[tokens[pack.rows + 1]]
        hidden, residual = fused[pack.rows], None
        cache = []
        for layer in range(self.spec["layers"]):
            x, residual = self._layer_input(layer, embeds, hidden, residual)
            q, k, v = self._qkv(layer, x, pack.row_positions)
            cache.append((k, v))
            attn = torch.cat([self._attend(q[s:e], k[ks:ke], v[ks:ke], ks, pack.row_self[s:e], pack.row_lo[s:e])
                              for s, e, ks, ke in pack.context_chunks], dim=0)
            hidden, residual = self._after_attention(layer, attn, residual)
        drafts, out = self._head(hidden, residual)
        return drafts, out, cache

    def step(self, tokens, hidden, positions, rows, lo, keys, cache, own):
        """One draft step of several chains: tokens [B] (target ids), hidden [B, H], positions [B]
        (RoPE), rows [B] and lo [B] (context visible from lo up to row), keys (start, end) of the
        context keys they need, own: per layer [(K, V)] of the chains' earlier steps ([B, s, kv, d]
        each, s >= 0). Returns (drafts, next hidden, own with this step's added)."""
        torch = self.torch
        embeds = self.embed[tokens]
        residual = None
        grown = []
        for layer in range(self.spec["layers"]):
            x, residual = self._layer_input(layer, embeds, hidden, residual)
            q, k, v = self._qkv(layer, x, positions)
            own_k, own_v = own[layer] if own else (None, None)
            own_k = k[:, None] if own_k is None else torch.cat([own_k, k[:, None]], dim=1)
            own_v = v[:, None] if own_v is None else torch.cat([own_v, v[:, None]], dim=1)
            grown.append((own_k, own_v))
            context_k, context_v = cache[layer]
            attn = self._attend(q, context_k[keys[0]:keys[1]], context_v[keys[0]:keys[1]], keys[0], rows, lo, own_k, own_v)
            hidden, residual = self._after_attention(layer, attn, residual)
        drafts, out = self._head(hidden, residual)
        return drafts, out, grown


def accepted(torch, drafter, pack, tokens, fused, choices, k):
    """(accepted drafts of the chain from each of the pack's anchors [A], chains cut where the
    data leaves the target's path: a device scalar). tokens [N], fused [N, H] (fc over the aux
    states), choices [N] (the target's greedy choice after each token), all on the device.
    Every chain runs its K steps as one batch with the others; a rejected or cut chain is masked
    out, not removed, so nothing waits on the device (on the CPU, where a look costs nothing, the
    steps stop once every chain of a chunk has ended)."""
    with torch.no_grad():
        first, hidden, cache = drafter.context(pack, tokens, fused)
        cut = torch.zeros((), dtype=torch.long, device=tokens.device)
        out = []
        for s, e, ks, ke in pack.anchor_chunks:
            a, rows, lo, positions = pack.anchors[s:e], pack.anchor_rows[s:e], pack.anchor_lo[s:e], pack.anchor_positions[s:e]
            draft, state, own = first[rows], hidden[rows], None
            alive = draft == choices[a + 1]
            count = alive.long()
            for j in range(2, k + 1):
                if pack.device == "cpu" and not bool(alive.any()):
                    break
                # Serving put draft j-1 (the target's own token) next; the data must have it too.
                on_path = tokens[a + j] == choices[a + j - 1]
                cut += (alive & ~on_path).sum()
                alive = alive & on_path
                draft, state, own = drafter.step(draft, state, positions + j - 1, rows, lo, (ks, ke), cache, own)
                alive = alive & (draft == choices[a + j])
                count += alive
            out.append(count)
        counted = torch.cat(out) if out else torch.zeros(0, dtype=torch.long, device=tokens.device)
        return counted, cut


def score_pack(torch, drafter, pack, tokens, fused, choices, k):
    """(histogram [K+1] of accepted drafts per chain, chains cut): device tensors, added up by the caller."""
    counted, cut = accepted(torch, drafter, pack, tokens, fused, choices, k)
    return torch.bincount(counted, minlength=k + 1), cut
