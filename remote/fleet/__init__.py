"""The fleet: one small answer per host for a console that watches many (`fleet.summary`): the
GPUs, jobs, servers, training runs and alerts, read from what the other areas' services already
hold, every figure with its age."""
