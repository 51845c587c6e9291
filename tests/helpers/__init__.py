"""What the tests share: waits on a condition (waits.py), the Pilot helpers and the small apps
that hold one pane (pilot.py), the console with a fixed host state for snapshots (snapshot.py),
notification channels (notify.py) and the speculators venv of the training tests (training.py).

A test module imports from here, never from another test module (tests/test_core_layers.py checks)."""
