"""What a score will read, checked before any work: the target's three tensors, the drafter (and
the one it is compared with), the data's layout and its first sample's layers and width, each
against the others. Anything that does not fit is Refused in one line, so nothing starts and
nothing is half-written. Standard library only.
"""

import os

from . import drafter as drafter_reading
from . import samples, target as target_reading
from .drafter import Refused

MAX_K = 16


def check(drafter_path, target_path, data, k, others=()):
    """{target, drafters: [drafter, then one per path of `others`], data: {layout, samples,
    final_normed}} for the job's spec: several drafters (`--vs`, a run's checkpoints) are scored
    on the same samples, so they must fuse the same number of aux layers."""
    if not 1 <= k <= MAX_K:
        raise Refused("K must be between 1 and %d" % MAX_K)
    target = target_reading.read(target_path)
    drafters = [drafter_reading.read(path, target) for path in [drafter_path] + list(others)]
    for other in drafters[1:]:
        if other["aux_count"] != drafters[0]["aux_count"]:
            raise Refused("drafters %s and %s fuse %d and %d aux layers: one data set cannot feed both"
                          % (drafters[0]["path"], other["path"], drafters[0]["aux_count"], other["aux_count"]))
    found = samples.find(data)
    described = samples.describe(found, drafters[0]["aux_count"], target)
    return {"target": target, "drafters": drafters, "data": os.path.abspath(data), "layout": found["layout"],
            "samples_found": len(found["files"]), "final_normed": described["final_normed"]}
