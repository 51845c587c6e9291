"""The morning report: the night on a host in one screen, read from what the daemon already
records (jobs, history, alerts, break-even lines), and the daily digest that sends it."""
