"""Alerts delivered while nobody watches: channels kept on the host (ntfy, Slack/Mattermost,
Discord, a JSON webhook, a command), what the daemon evaluates into alerts, a queue in SQLite
that survives restarts, and the delivery service that sends each alert once, retried for a day."""

# What another area may import from here (tests/test_core_layers.py holds every area to it).
PUBLIC = ("alert", "channels", "evaluate", "send", "queue", "datagen_disks", "pace", "stalls")  # stalls: the rule the report tells a stall by
