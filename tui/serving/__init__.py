"""Inference servers and their speculation (remote/serving): the Speculation pane (break-even
lines are the host's), `specdeck serve`, `spec`, `breakeven` and `bench`, and how a server's
figures read (model.py)."""
