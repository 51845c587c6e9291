"""Scoring a drafter before serving it, from the console's side: the `score` command."""
