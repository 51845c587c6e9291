"""Notification channels as the host reports them."""


def status(client, channel_id):
    """A channel's delivery status (sent, failures, pending, last_error) from notify.list."""
    return next(c["status"] for c in client.call("notify.list")["channels"] if c["id"] == channel_id)
