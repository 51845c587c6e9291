"""The table of the host's jobs, and the cells of one job as the user reads them."""

from rich.text import Text
from textual.binding import Binding
from textual.widgets import DataTable

from .. import display

NAME_WIDTH = 40
COLUMNS = (("id", "id"), ("kind", "kind"), ("name", "name"), ("state", "state"), ("started", "started"), ("runtime", "runtime"), ("exit", "exit"))


def job_cells(job, now=None):
    """The table cells of one job, as the user reads them."""
    state = Text(job.get("state") or "?", style=display.STATE_STYLES.get(job.get("state"), ""))
    name = job.get("name") or ""
    if len(name) > NAME_WIDTH:
        name = name[: NAME_WIDTH - 1] + "…"
    return (
        job["id"], job.get("kind") or "", Text(name), state,
        display.format_time(job.get("started_at")), display.format_duration(display.job_runtime(job, now)), display.exit_text(job),
    )


class JobsTable(DataTable):
    """The job list; enter opens the highlighted job's log."""

    BINDINGS = [Binding("enter", "select_cursor", "open", tooltip="open the job's log")]
