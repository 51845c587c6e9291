"""`specdeck` on the command line: one module per capability, each adding its commands."""
