"""Lets speculators train on a machine without an accelerator (tests only, never the product).

Put this directory on PYTHONPATH of the training process: the local rank becomes "cpu",
torch.accelerator's synchronize is a no-op and reports no device, and DataLoader stops asking
for pinned memory (which needs an accelerator)."""

import os

if os.environ.get("SPECDECK_TEST_CPU_PATCH") == "1":
    import torch
    import torch.utils.data

    torch.accelerator.synchronize = lambda *args, **kwargs: None
    torch.accelerator.is_available = lambda: False
    _init = torch.utils.data.DataLoader.__init__

    def _no_pin(self, *args, **kwargs):
        kwargs["pin_memory"] = False
        _init(self, *args, **kwargs)

    torch.utils.data.DataLoader.__init__ = _no_pin
    import speculators.train.distributed as _distributed
    import speculators.train.trainer as _trainer

    _distributed.get_local_rank = _trainer.get_local_rank = lambda: "cpu"
