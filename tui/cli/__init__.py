"""`specdeck` on the command line: the parser and entry point (main.py), what every command shares
(common.py), and the commands of no capability (config, daemon); each capability's commands live
in its own folder (tui/jobs/cli.py, tui/serving/cli.py, ...) and main.py adds them."""
