"""Alerts delivered while nobody watches: channels kept on the host (ntfy, Slack/Mattermost,
Discord, a JSON webhook, a command), what the daemon evaluates into alerts, a queue in SQLite
that survives restarts, and the delivery service that sends each alert once, retried for a day."""
