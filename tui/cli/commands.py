"""The headless commands, by the area that adds them: what `specdeck WORD` is, known without
importing any area (the entry point decides with it before anything else loads)."""

# Each area's module and the commands it adds, in help order. A command imports its own module
# only: a headless command over a warm link is one round trip plus this process's start, and
# importing every area's CLI (and building every parser) was most of that start.
# tests/test_console_cli_errors.py checks this table against what each module adds.
AREAS = (
    ("tui.telemetry.cli", ("gpus",)),
    ("tui.jobs.cli", ("run", "jobs", "logs", "stop", "forget")),
    ("tui.checkpoints.cli", ("inspect", "compare")),
    ("tui.downloads.cli", ("download", "verify")),
    ("tui.serving.cli", ("serve", "spec", "breakeven", "bench", "advise", "coverage")),
    ("tui.scoring.cli", ("score",)),
    ("tui.serving.baseline_cli", ("baseline", "doctor")),
    ("tui.cli.config", ("config",)),
    ("tui.training.cli", ("train", "curves", "checkpoints")),
    ("tui.notify.cli", ("notify",)),
    ("tui.report.cli", ("report",)),
    ("tui.fleet.cli", ("fleet",)),
    ("tui.cli.daemon", ("daemon",)),
    ("tui.cli.links", ("disconnect",)),
    ("tui.web.cli", ("web",)),
)
COMMAND_NAMES = frozenset(name for _, names in AREAS for name in names)
