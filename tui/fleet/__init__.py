"""The fleet: several hosts at once, one row each (`specdeck fleet`, the console's Fleet pane)."""
