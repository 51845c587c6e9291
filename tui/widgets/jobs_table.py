"""The table of the host's jobs, and the cells of one job as the user reads them."""

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from .. import display

NAME_WIDTH = 40
# What a babysitter reads first comes first; the name, the widest, is last, so a narrow
# terminal cuts the name, never the state, runtime or exit code.
COLUMNS = (("id", "id"), ("kind", "kind"), ("state", "state"), ("runtime", "runtime"), ("exit", "exit"), ("started", "started"), ("name", "name"))


def job_cells(job, now=None):
    """The table cells of one job, as the user reads them."""
    state = Text(job.get("state") or "?", style=display.STATE_STYLES.get(job.get("state"), ""))
    name = job.get("name") or ""
    if len(name) > NAME_WIDTH:
        name = name[: NAME_WIDTH - 1] + "…"
    return (
        job["id"], job.get("kind") or "", state, display.format_duration(display.job_runtime(job, now)), display.exit_text(job),
        display.format_time(job.get("started_at")), Text(name),
    )


class JobsTable(DataTable):
    """The job list; enter opens the highlighted job's log."""

    BINDINGS = [Binding("enter", "select_cursor", "open", tooltip="open the job's log")]
