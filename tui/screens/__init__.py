"""Modal screens every pane may use, one per module (confirm, prompt, help, the host, its key, the
file picker). A screen of one capability lives in that capability's folder."""
