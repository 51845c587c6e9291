"""Which lines of a multi-node run's log are the run's own: a Slurm job's output file holds what
every task wrote, each line labelled by its rank where the launcher labels them (`srun --label`:
`0: `, ` 3: `; torchrun's `--tee`: `[default0]:`, `[rank0]:`). One set of curves comes from the
rank that logs, rank 0: its lines are read without their label, the other ranks' are skipped,
and lines without a label (the batch script's own, a launcher whose other ranks are quiet) are
read as they are.
"""

import re

_SRUN_LABEL = re.compile(r" {0,6}(\d{1,6}): ")
_TORCHRUN_LABEL = re.compile(r"\[(?:default|rank)(\d{1,6})\]:")
LOGGING_RANK = 0


class RankFilter:
    """`line(text)`: the text of a line of the rank that logs (its label taken off), None for
    another rank's; counts what it skipped (`skipped`)."""

    def __init__(self):
        self.skipped = 0

    def line(self, text):
        for pattern in (_SRUN_LABEL, _TORCHRUN_LABEL):
            match = pattern.match(text)
            if match is None:
                continue
            if int(match.group(1)) != LOGGING_RANK:
                self.skipped += 1
                return None
            text = text[match.end():]
        return text


def is_multi_task(job):
    """Whether the job's log may hold several ranks' lines: a job run through Slurm."""
    return job.get("engine") == "slurm"
