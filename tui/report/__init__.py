"""The morning report on the laptop: the `report` command and the "while you were away" screen."""
