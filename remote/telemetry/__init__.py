"""GPU and host telemetry: a daemon service samples NVML and /proc once a second into the
history store and the `gpus` topic, maps GPU processes to specdeck jobs, and raises the alerts
a babysitter wants (idle GPU under a running job, memory full, heat, throttling, failed jobs).

nvidia-ml-py (`pynvml`) rides in the agent's zipapp and is imported only when the sampler
starts; everything else here is the standard library.
"""

# What another area may import from here (tests/test_core_layers.py holds every area to it).
PUBLIC = ("node_sample",)
