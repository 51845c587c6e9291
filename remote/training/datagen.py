"""A data-generation job's progress from its log: samples done of total and the rate, read from
tqdm (`450/1000 [00:10<00:12, 44.5it/s]`) and rich (`11/11  [ 0:00:14 < 0:00:00 , 1 it/s ]`)
progress bars, and the total from speculators' `Processing N samples`; a tqdm bar that knows no
total (`450it [00:10, 44.5it/s]`: a generator over a stream) gives the samples done and the rate,
the total left unknown (None).

The bar's pattern has bounded quantifiers and starts only where a number starts (not inside
one), so a line costs time linear in its length: a line of 60,000 digits is one failed attempt
of at most 16 characters at its first digit, not one per digit that each runs to its end.
"""

import re

from .scan import finditer_pieces

_BAR = re.compile(r"(?<!\d)(?P<done>\d{1,15})/(?P<total>\d{1,15})[ \t]{0,8}\[[ \t]{0,8}[\d:]{1,12}[ \t]{0,8}<[ \t]{0,8}[\d:?]{1,12}"
                  r"[ \t]{0,8},[ \t]{0,8}(?P<rate>\d{1,12}(?:\.\d{1,12})?)[ \t]{0,8}(?P<unit>it/s|s/it)")
_OPEN_BAR = re.compile(r"(?<![\d/])(?P<done>\d{1,15})it[ \t]{0,8}\[[ \t]{0,8}[\d:]{1,12}[ \t]{0,8},[ \t]{0,8}"
                       r"(?P<rate>\d{1,12}(?:\.\d{1,12})?|\?)[ \t]{0,8}(?P<unit>it/s|s/it)")
_SAMPLES = re.compile(r"Processing (?P<total>\d{1,15}) samples")


class Samples:
    """Samples done, total and rate so far (`read_line` each line; `state()` to keep them)."""

    def __init__(self, state=None):
        state = state or {}
        self.done = state.get("done")
        self.total = state.get("total")
        self.rate = state.get("rate")
        self.recorded_at = state.get("recorded_at", 0.0)  # when the history store last got them

    def read_line(self, line):
        """Take what one line says; True when it said something."""
        said = False
        match = _SAMPLES.search(line) if "Processing " in line else None
        if match:
            self.total = int(match.group("total"))
            said = True
        bar = None
        if "/" in line:
            for bar in finditer_pieces(_BAR, line):
                pass  # a line holding several redraws: the last one counts
        if bar is None and "it [" in line:
            for bar in finditer_pieces(_OPEN_BAR, line):
                pass
        if bar is not None:
            groups = bar.groupdict()
            self.done = int(groups["done"])
            if groups.get("total") is not None:
                self.total = self.total or int(groups["total"])
            rate = float(groups["rate"]) if groups["rate"] != "?" else None
            self.rate = rate if bar.group("unit") == "it/s" or rate is None else (1.0 / rate if rate else None)
            said = True
        return said

    def eta_s(self):
        if self.rate and self.done is not None and self.total:
            return (self.total - self.done) / self.rate
        return None

    def state(self):
        return {"done": self.done, "total": self.total, "rate": self.rate, "recorded_at": self.recorded_at}
