"""Jobs on the host (remote/core's jobs): the Jobs pane, `specdeck run`, `jobs`, `logs`, `stop` and
`forget`, the jobs table, the new-job form, and how a job reads (model.py)."""
