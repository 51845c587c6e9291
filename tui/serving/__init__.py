"""Inference servers and their speculation (remote/serving): the Speculation pane, its break-even
lines, `specdeck serve`, `spec`, `breakeven` and `bench`, and how a server's figures read (model.py)."""
