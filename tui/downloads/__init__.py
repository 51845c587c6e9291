"""Downloads from the hub on the host (remote/downloads): the Downloads pane, `specdeck download`
and `verify`, the new-download form, a file's progress bar, starting a download again or
repairing one, and how a download reads (model.py)."""
