"""Modal screens of the console, one per module."""
