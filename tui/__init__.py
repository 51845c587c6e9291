"""specdeck on the laptop: the Textual console, the CLI and the connection to a host."""
