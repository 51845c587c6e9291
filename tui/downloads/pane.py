"""The Downloads pane: the host's download jobs, per-file and total progress, then the verdict.

It shows the download jobs of the app's job events (no polling), each row saying whether it
downloads or verifies. Each download job carries its parameters (the agent keeps them as the
job's meta), so that `r` can start the same download again (on a verification that found files
wrong: download those again, which verifies them) and `v` and `t` know the repo and directory,
whoever started it. `x` asks before it cancels.

A job's record carries only a summary of its files (counts, the few at work, the first
failures), whatever their number; the per-file rows are a page the pane asks the host for
(`download.files`) for the selected job, again as its progress moves; `.` and `,` turn the page.
"""

from rich.text import Text
from textual import on
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Label, ProgressBar, Static

from .. import config
from ..display import STATE_STYLES, console_next_step, format_bytes, format_duration, safe_text
from ..jobs import model as jobs
from ..messages import AgentError, OpenCheckpoint
from ..pane import Pane
from ..screens.confirm import ConfirmScreen
from .files_view import FILES_PAGE, FilesView, verdict_text
from .form import DownloadForm
from .model import COLUMNS, VERDICT_STATES, action, bytes_total, figures, has_ended, is_active, local_dir, progress, repo
from .repair import params_from_meta, repair_params

CALL_TIMEOUT_S = 30.0
START_TIMEOUT_S = 180.0
HINT = "n new  x cancel  r retry/repair  v verify again  t open in Tensors  . , files"


def job_message(job):
    """The one line a job ended with: its verdict, else its error."""
    found = progress(job)
    verdict = found.get("verdict") or {}
    return console_next_step(verdict.get("message") or found.get("error") or job.get("error") or job["state"])


class DownloadsPane(Pane):
    """Download jobs on the host: n new, x cancel, r retry, v verify again, t open in Tensors."""

    PANE_TITLE = "Downloads"
    SHORT_TITLE = "Down"  # its tab on a narrow terminal (tui/widgets/pane_tabs.py)

    DEFAULT_CSS = """
    DownloadsPane { height: 1fr; }
    DownloadsPane #downloads-jobs { height: 1fr; min-height: 4; }
    DownloadsPane #downloads-detail { height: 2fr; border-top: solid $accent; }
    DownloadsPane #downloads-summary { height: auto; }
    DownloadsPane #downloads-total-row { height: 1; }
    DownloadsPane #downloads-total-row > Label { width: 8; }
    DownloadsPane #downloads-verdict { height: auto; }
    DownloadsPane #downloads-files-view { height: 1fr; }
    """

    BINDINGS = [
        Binding("n", "new", "new download"),
        Binding("x", "cancel", "cancel"),
        Binding("r", "retry", "retry/repair", tooltip="start it again; a verification that found files wrong: download those again"),
        Binding("v", "verify", "verify again"),
        Binding("t", "open_tensors", "open in Tensors"),
        Binding("full_stop", "files_page(1)", "next files", show=False, key_display=".", tooltip="the next page of the download's files"),
        Binding("comma", "files_page(-1)", "previous files", show=False, key_display=",", tooltip="the previous page of the download's files"),
    ]
    SHORT_LABELS = {"open_tensors": "Tensors"}  # the key bar's word when it is short of room (tui/widgets/key_bar.py)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.jobs = {}  # id -> latest job dict (download kind only)
        self.seen_states = {}  # id -> the state last shown
        self.notified = set()
        self.book = None
        self.stopped_here = set()  # ids the user cancelled: their end is no news
        self.selected_id = None
        self.files_page = None  # the last download.files reply shown: {id, total, offset, files}
        self.files_offset = 0  # the first file of the page asked for, of the selected job
        self._files_asking = False  # a download.files request is on its way
        self._files_again = False  # the job moved meanwhile: ask again when it is back
        self._files_error = None
        self._stale = False
        self._status_transient = False  # the hint or the empty-list line: the next change replaces it

    def compose(self):
        table = DataTable(id="downloads-jobs", cursor_type="row", zebra_stripes=True)
        for label, key in COLUMNS:
            table.add_column(label, key=key)
        yield table
        with Vertical(id="downloads-detail"):
            yield Static(id="downloads-summary")
            with Horizontal(id="downloads-total-row"):
                yield Label("total")
                yield ProgressBar(id="downloads-total", show_eta=False)
            yield Static(id="downloads-verdict")
            yield FilesView(id="downloads-files-view")
        yield self.status_line("asking the host for its downloads ...", id="downloads-status")

    def on_mount(self):
        self._status_transient = True
        self._show_detail()

    # -- job events

    def jobs_changed(self, book, changed, records):
        self.book = book
        downloads = book.of_kind("download")
        # Verdicts are announced whether the pane is shown or not; the table waits until it is.
        for job in downloads:
            if job["id"] in changed:
                self._notify_verdict(job)
        if self.active:
            self._show(downloads)
        else:
            self._stale = True

    def pane_shown(self):
        if self._stale and self.book is not None:
            self._stale = False
            # After the layout that makes the pane visible: progress bars round to their width.
            self.call_after_refresh(lambda: self._show(self.book.of_kind("download")))

    def _show(self, downloads):
        self._merge(downloads)
        if self._status_transient:
            self._set_status(HINT if self.jobs else "no downloads on this host yet: n starts one", transient=True)

    def _merge(self, jobs):
        table = self.query_one("#downloads-jobs", DataTable)
        current = {job["id"]: job for job in jobs}
        # A job just started here may be selected before its first event: keep it selected.
        awaited = self.selected_id is not None and self.selected_id not in self.jobs and self.selected_id not in self.seen_states
        for job_id in [key for key in self.jobs if key not in current]:
            table.remove_row(job_id)
            self.jobs.pop(job_id)
        for job in jobs:
            cells = self._row_cells(job)
            if job["id"] in self.jobs:
                for (_, key), value in zip(COLUMNS, cells):
                    table.update_cell(job["id"], key, value, update_width=True)
            else:
                table.add_row(*cells, key=job["id"])
            self.jobs[job["id"]] = job
        if self.selected_id not in self.jobs and jobs and not awaited:
            self.files_offset = 0
            self.selected_id = jobs[-1]["id"]  # follow the newest download until the user picks another
        if self.selected_id in self.jobs:
            row = table.get_row_index(self.selected_id)
            if table.cursor_row != row:
                table.move_cursor(row=row)  # e.g. onto the job a retry has just started
        self._show_detail()

    def _notify_verdict(self, job):
        state, job_id = job["state"], job["id"]
        before = self.seen_states.get(job_id)
        self.seen_states[job_id] = state
        # A stop is no news either: whoever asked for it knows (the row and the detail say it).
        if state not in VERDICT_STATES or state == jobs.STOPPED or job_id in self.notified:
            return
        self.notified.add(job_id)
        # A job that had ended before this console opened is no news, nor one the user stopped.
        # A newer one is announced even if its first event is its end (a quick verify).
        if (self.book.is_old(job_id) and before in (None,) + VERDICT_STATES) or job_id in self.stopped_here:
            return
        severity = "information" if state == "verified" else "error"
        self.notify("%s %s: %s" % (job_id, state, job_message(job)), title="download %s" % state, severity=severity, markup=False)

    @staticmethod
    def _row_cells(job):
        shown = figures(job)
        # Text, not str: a str cell would be read as markup.
        return tuple(Text(shown[key], style=STATE_STYLES.get(shown[key], "") if key == "state" else "") for _, key in COLUMNS)

    # -- the selected job

    @on(DataTable.RowHighlighted, "#downloads-jobs")
    def _row_highlighted(self, event):
        event.stop()
        if event.row_key is not None and event.row_key.value in self.jobs:
            if self.selected_id != event.row_key.value:
                self.files_offset = 0
            self.selected_id = event.row_key.value
            self._show_detail()

    def selected_job(self):
        return self.jobs.get(self.selected_id)

    def _show_detail(self):
        job = self.selected_job()
        summary = self.query_one("#downloads-summary", Static)
        total_bar = self.query_one("#downloads-total", ProgressBar)
        verdict = self.query_one("#downloads-verdict", Static)
        # Hidden while empty: an idle bar with no total would animate for nothing.
        self.query_one("#downloads-detail").display = job is not None
        if job is None:
            self.files_page = None
            self.query_one(FilesView).show(None, None, None)
            return
        found = progress(job)
        shown = figures(job)
        where = local_dir(job, params_from_meta(job))
        text = Text()
        text.append("%s  " % shown["id"], style="bold")
        text.append("%s  " % shown["kind"], style="dim")
        text.append(shown["repo"], style="bold")
        if where:
            text.append("  ->  ", style="dim")
            text.append(safe_text(where))
        text.append("\nstate ", style="dim")
        text.append(shown["state"], style=STATE_STYLES.get(job["state"], ""))
        if is_active(job):
            text.append("  rate ", style="dim")
            text.append(shown["rate"])
            text.append("  ETA ", style="dim")
            text.append(shown["eta"])
        else:
            text.append("  took ", style="dim")
            text.append(format_duration(jobs.runtime(job)))
        total = bytes_total(job)
        if total is not None:
            text.append("\n{:,} of ".format(found.get("bytes_done") or 0) + format_bytes(total, exact=True), style="dim")
        elif not has_ended(job):
            text.append("\nresolving the file list ...", style="dim")
        summary.update(text)
        # A job that ended before it had a file list has no progress to show: its error says why,
        # and a bar without a total would animate as if it were still working.
        self.query_one("#downloads-total-row").display = total is not None or not has_ended(job)
        total_bar.update(total=total, progress=found.get("bytes_done") or 0)
        verdict.update(verdict_text(job))
        self._ask_files(job)
        self._show_files()

    # -- the selected job's files, a page at a time

    def _ask_files(self, job):
        """Ask for the page of the selected job's files, unless the page shown is of its final
        list; one request at a time (a job that moves meanwhile is asked again after it)."""
        page = self.files_page
        if (page is not None and page["id"] == job["id"] and page["offset"] == self.files_offset
                and page.get("final") and not jobs.is_live(job)):
            return
        if self.client is None:
            return  # asked once there is one: its job events come with it
        if self._files_asking:
            self._files_again = True
            return
        self._files_asking, self._files_again = True, False
        # Once the process has ended, its list is written for good: that page is not asked again.
        job_id, offset, final = job["id"], self.files_offset, not jobs.is_live(job)
        self.request("download.files", {"id": job_id, "offset": offset, "limit": FILES_PAGE},
                     done=lambda page: self._files_came(dict(page, final=final), job_id),
                     failed=lambda failure: self._files_came(None, job_id, failure), notify=False, timeout=CALL_TIMEOUT_S)

    def _files_came(self, page, job_id, failure=None):
        self._files_asking = False
        self._files_error = None if failure is None else getattr(failure, "message", str(failure))
        if job_id == self.selected_id:
            if page is not None:
                if page["offset"] >= page["total"] > 0 and self.files_offset > 0:  # the list got shorter
                    self.files_offset = (page["total"] - 1) // FILES_PAGE * FILES_PAGE
                    self._files_again = True
                self.files_page = page
            self._show_files()
        job = self.selected_job()
        if job is not None and (self._files_again or job["id"] != job_id):
            self._ask_files(job)

    def _show_files(self):
        job = self.selected_job()
        page = self.files_page if job is not None and self.files_page is not None and self.files_page["id"] == job["id"] else None
        self.query_one(FilesView).show(job, page, self._files_error)

    def action_files_page(self, step):
        job = self.selected_job()
        if job is None:
            self._set_status("no download selected", error=True)
            return
        page = self.files_page if self.files_page is not None and self.files_page["id"] == job["id"] else None
        total = page["total"] if page is not None else 0
        offset = self.files_offset + step * FILES_PAGE
        if offset < 0 or offset >= total:
            self._set_status("no %s page of %s's files" % ("next" if step > 0 else "previous", job["id"]))
            return
        self.files_offset = offset
        self._ask_files(job)

    # -- keys

    def action_new(self):
        self.app.push_screen(DownloadForm(), self._form_done)

    def _form_done(self, result):
        if result:
            self._track_started(result["job"], result["params"], "download")

    def _track_started(self, job, params, what):
        if self.selected_id != job["id"]:
            self.files_offset = 0
        self.selected_id = job["id"]
        self._set_status("%s started: %s (%s)" % (what, job["id"], params["repo"]))
        if self.book is not None:
            self._show(self.book.of_kind("download"))

    def _selected_or_say(self, action):
        job = self.selected_job()
        if job is None:
            self._set_status("no download selected to %s" % action, error=True)
        return job

    def _params_or_say(self, job, action):
        params = params_from_meta(job)
        if params is None:
            self._set_status(
                "%s is not offered for %s: the host did not record its repo and directory"
                % (action, job["id"]),
                error=True,
            )
        return params

    def action_cancel(self):
        job = self._selected_or_say("cancel")
        if job is None:
            return
        if not jobs.is_live(job):
            self._set_status("%s has already ended (%s)" % (job["id"], job["state"]), error=True)
            return
        what = action(job)
        kept = "\nThe bytes on disk are kept: r starts it again from them." if what == "download" else ""
        question = "Cancel %s, the %s of %s?%s" % (job["id"], what, safe_text(repo(job)), kept)
        self.app.push_screen(ConfirmScreen(question, yes_label="Cancel the %s" % what, no_label="Keep it"),
                             lambda yes: yes and self._stop(job))

    def _stop(self, job):
        self._set_status("stopping %s ..." % job["id"])
        self.stopped_here.add(job["id"])
        self.request("jobs.stop", {"id": job["id"]}, done=lambda stopped: self._set_status("%s stopped" % stopped["id"]),
                     title="stopping %s failed" % job["id"], timeout=CALL_TIMEOUT_S)

    def _ended_or_say(self, job, action):
        if job is not None and not has_ended(job):
            self._set_status("%s is still running: x cancels it before you %s" % (job["id"], action), error=True)
            return None
        return job

    def action_retry(self):
        job = self._ended_or_say(self._selected_or_say("retry"), "retry")
        params = job and self._params_or_say(job, "retry")
        if not params:
            return
        repair = repair_params(job) if action(job) == "verify" else None
        if repair is not None:  # the verification found files wrong: download those again, which verifies them
            if repair["files"] == params["files"]:  # more were wrong than a verdict names: all again, the right ones kept
                self._set_status("repairing %s: downloading %s again, keeping the files that are right ..." % (params["local_dir"], params["repo"]))
            else:
                self._set_status("repairing %s: downloading %s again ..." % (params["local_dir"], ", ".join(repair["files"])))
            self._call_start("download.start", repair, "repair")
        elif action(job) == "verify":  # nothing wrong to fetch: a retry of a verify verifies
            self._set_status("verifying %s against %s again ..." % (params["local_dir"], params["repo"]))
            self._call_start("download.verify", params, "verification")
        else:
            self._set_status("starting %s again ..." % params["repo"])
            self._call_start("download.start", params, "download")

    def action_verify(self):
        job = self._ended_or_say(self._selected_or_say("verify"), "verify again")
        params = job and self._params_or_say(job, "verify again")
        if params:
            self._set_status("verifying %s against %s ..." % (params["local_dir"], params["repo"]))
            self._call_start("download.verify", params, "verification")

    def action_open_tensors(self):
        job = self._selected_or_say("open")
        if job is None:
            return
        where = local_dir(job, params_from_meta(job))
        if not where:
            self._set_status("%s has not said where its files go yet: try again in a moment" % job["id"], error=True)
            return
        self.post_message(OpenCheckpoint(where))

    def _call_start(self, method, params, what):
        # A job that named no interpreter runs under the one remembered for the host since (the
        # form's remember box, which the agent's refusals point to), else the agent's own.
        if not params.get("python"):
            params = dict(params, python=config.remembered(getattr(self.app, "host", None), "ml_python"))
        # The token goes with the request as the form sends it (the console's HF_TOKEN), never in meta.
        self.request(method, dict(params, token=config.hub_token()), done=lambda job: self._track_started(job, params, what),
                     failed=lambda message: self._set_status("%s refused" % what, error=True), title="%s refused" % what, timeout=START_TIMEOUT_S)

    def on_agent_error(self, message: AgentError):
        # Refusals of r and v on their way to the app's notification: the agent's next step
        # names CLI flags; here it is the form's host python field.
        message.message = console_next_step(message.message)

    def _set_status(self, text, error=False, transient=False):
        self.set_status(text, error)
        self._status_transient = transient
