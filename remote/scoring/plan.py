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


def check(drafter_path, target_path, data, k, vs_path=None):
    """{target, drafters: [drafter, vs?], data: {layout, samples, final_normed}} for the job's spec."""
    if not 1 <= k <= MAX_K:
        raise Refused("K must be between 1 and %d" % MAX_K)
    target = target_reading.read(target_path)
    drafters = [drafter_reading.read(drafter_path, target)]
    if vs_path:
        drafters.append(drafter_reading.read(vs_path, target))
        if drafters[1]["aux_count"] != drafters[0]["aux_count"]:
            raise Refused("the two drafters fuse %d and %d aux layers: one data set cannot feed both"
                          % (drafters[0]["aux_count"], drafters[1]["aux_count"]))
    found = samples.find(data)
    described = samples.describe(found, drafters[0]["aux_count"], target)
    return {"target": target, "drafters": drafters, "data": os.path.abspath(data), "layout": found["layout"],
            "samples_found": len(found["files"]), "final_normed": described["final_normed"]}
