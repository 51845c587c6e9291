"""Alerts that reach a person (remote/notify): `specdeck notify`, the notifications screen, alerts
on the laptop's desktop while the console is open, and how a channel reads (model.py)."""
