"""The host's GPU samples as its model holds them (`HostModel.gpus`): the latest full sample,
rebuilt from `telemetry.follow`'s snapshot and deltas on the client's thread, with the time it
came, so every view shows how old it is; the model keeps it while another host is shown."""

from remote.telemetry.sample import apply_delta

from .records import Aged


class GpuSamples:
    """The latest sample (`latest`: an Aged one, None before the first) of the host's GPUs,
    its processes, its CPU and memory, and its Slurm nodes."""

    def __init__(self):
        self.latest = None
        self._state = None  # the full sample of the stream, rebuilt on the client's thread

    @property
    def sample(self):
        return self.latest.value if self.latest is not None else None

    @property
    def received_s(self):
        return self.latest.received_s if self.latest is not None else None

    def follow(self, model, owner, on_samples):
        """telemetry.follow for `owner` while it is shown: `on_samples(samples)` on the UI thread,
        once the latest of them is the model's."""
        return model.follow(owner, "telemetry.follow", {}, lambda items: on_samples(self.take(items)), prepare=self.rebuild)

    def rebuild(self, data, seq):
        """On the client's thread: the full sample after this frame."""
        if data.get("snapshot") is not None:
            self._state = data["snapshot"]
        for record in data.get("records") or ():
            if "host" not in record and "gpus" not in record and record.get("stale"):
                # A marker: the host's figures are old. Nothing to apply, only their age to show.
                if self._state is not None:
                    self._state = dict(self._state, stale=True, age_s=record.get("age_s"), error=record.get("error"))
                continue
            self._state = apply_delta(self._state, record)
            self._state.update(stale=record.get("stale", False), age_s=record.get("age_s"), error=record.get("error"))
        return self._state

    def take(self, items):
        """[(sample, seq)] delivered to the UI: the samples, the latest of them kept."""
        samples = [sample for sample, _ in items if sample is not None]
        if samples:
            self.latest = Aged(samples[-1])
        return samples
