"""Drafter training and data generation (remote/training): the Training pane, its curves
(series.py), `specdeck train`, `curves` and `checkpoints`, and how a run reads (model.py)."""
