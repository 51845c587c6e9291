"""specdeck on the laptop: the Textual console, the CLI and the connection to a host; one folder
per capability (jobs, downloads, checkpoints, telemetry, serving, training, notify), as remote/ has."""
