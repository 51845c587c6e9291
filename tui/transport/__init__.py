"""The laptop's way to a host's agent: the agent client and its links (a local subprocess, SSH,
the link keeper that holds SSH links warm between commands), host keys and the agent's boot."""
