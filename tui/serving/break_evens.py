"""The Speculation pane's break-even lines: per target model, set by hand (`b`: an accept length,
or CYCLE_MS@BASELINE_TPS) and kept in the laptop's config per host, so a line holds for every
server of that target, in this console and the next; else the last A/B benchmark's for the
same target and drafter.

    [hosts."me@gpu01".break_even."/data/k2.5"]
    accept_length = 2.46
    how = "30 ms x 82 tok/s"
"""

from remote.serving.breakeven import break_even

from .. import config

CONFIG_KEY = "break_even"


def target_key(target):
    return target.rstrip("/") if target else None


def parse(answer):
    """(accept length, how it was given) of what the user typed; ValueError when it is neither
    a number (2.46) nor CYCLE_MS@BASELINE_TPS (30@82)."""
    if "@" in answer:
        cycle_ms, baseline_tps = (float(part) for part in answer.split("@", 1))
        return break_even(cycle_ms, baseline_tps)["break_even_accept_length"], "%g ms x %g tok/s" % (cycle_ms, baseline_tps)
    return float(answer), "set by hand"


class BreakEvens:
    """Break-even per target (by hand) and per (target, drafter) (from benchmarks)."""

    def __init__(self, host):
        self.host = host
        self.by_hand = {}  # target (or a server id, for a server of no known target) -> (value, how)
        self.from_bench = {}  # (target, drafter) -> (value, "bench jN")
        table = config.host_settings(host).get(CONFIG_KEY)
        for target, entry in (table.items() if isinstance(table, dict) else ()):
            value = entry.get("accept_length") if isinstance(entry, dict) else entry
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                how = entry.get("how") if isinstance(entry, dict) and isinstance(entry.get("how"), str) else "set by hand"
                self.by_hand[target] = (float(value), how)

    def of(self, server_id, info):
        """(accept length, where it came from) for a server, or (None, None)."""
        target = target_key(info.get("target"))
        if (target or server_id) in self.by_hand:
            return self.by_hand[target or server_id]
        return self.from_bench.get((target, info.get("drafter")), (None, None))

    def bench_result(self, target, drafter, value, how):
        self.from_bench[(target_key(target), drafter)] = (value, how)

    def set_by_hand(self, server_id, info, value, how):
        """Set the line of the server's target (of the server alone when its target is not
        known) and keep it in the config; returns why it could not be kept, or None."""
        target = target_key(info.get("target"))
        self.by_hand[target or server_id] = (value, how)
        if not target:
            return None
        try:
            table = dict(config.host_settings(self.host).get(CONFIG_KEY) or {})
            table[target] = {"accept_length": value, "how": how}
            config.remember(self.host, {CONFIG_KEY: table})
        except (OSError, config.ConfigError) as exc:
            return str(exc)
        return None
