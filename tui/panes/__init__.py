"""The console panes, one per module."""
