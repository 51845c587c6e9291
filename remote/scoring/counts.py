"""The figures of a score, from counts alone: how many draft chains accepted 0, 1, ..., K drafts.
Counts add (two runs, two nodes, two halves of the data: add their histograms), and every
figure is derived from them here, once:
- the unconditional share of position k: P(the first k drafts all accepted), what vLLM's
  per-position counter gives (Model-Optimizer's profile calls it the marginal accept rate);
- the conditional rate of position k: P(draft k accepted | the k-1 before it were);
- the predicted accept length at K' <= K: 1 + the sum of the first K' shares, counting the
  target's own bonus token as vLLM and SGLang do (a chain cut at K' accepts the same prefix).
Standard library only.
"""


def empty(k):
    return [0] * (k + 1)


def add(histogram, other):
    """Two histograms of the same K, added."""
    if len(histogram) != len(other):
        raise ValueError("histograms of K=%d and K=%d do not add" % (len(histogram) - 1, len(other) - 1))
    return [a + b for a, b in zip(histogram, other)]


def figures(histogram):
    """{chains, unconditional_shares, conditional_rates, predicted_accept_length (at K),
    predicted_accept_length_per_k: [{k, accept_length}], accept_length_histogram: {"1": n, ...,
    "K+1": n}} of a histogram whose entry n counts chains that accepted n drafts."""
    k = len(histogram) - 1
    chains = sum(histogram)
    reached = [sum(histogram[n:]) for n in range(k + 1)]  # reached[j]: chains whose first j drafts were accepted
    shares = [reached[j] / float(chains) if chains else None for j in range(1, k + 1)]
    conditional = [reached[j] / float(reached[j - 1]) if reached[j - 1] else None for j in range(1, k + 1)]
    per_k = []
    total = 1.0
    for j, share in enumerate(shares, 1):
        total = None if share is None or total is None else total + share
        per_k.append({"k": j, "accept_length": total})
    return {
        "chains": chains,
        "unconditional_shares": shares,
        "conditional_rates": conditional,
        "predicted_accept_length": per_k[-1]["accept_length"] if per_k else (1.0 if chains else None),
        "predicted_accept_length_per_k": per_k,
        "accept_length_histogram": dict((str(n + 1), histogram[n]) for n in range(k + 1)),
    }
