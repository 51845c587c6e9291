"""Console polish from issue 11, driven by keys (Pilot) against the real local agent (and the
fake hub over real HTTP for downloads): the new-job form has what `specdeck run` has and keeps
what was typed; `r` on a verify job verifies; a failed download shows its error without a
progress bar; refusals name console keys, not CLI flags; sizes are not bracketed twice.
Waits are bounds on a hang, not speed assertions.
"""

import os
import re
import sys

from textual.widgets import DataTable, Input, Select, Static

from tests.checkpoint_fixtures import small_drafter_files
from tests.helpers.cli import use_home
from tests.helpers.pilot import DownloadsHost, connected, fill_form, header_text, job_rows, screen_text, text_of, type_text
from tests.helpers.waits import wait_for, wait_until
from tui.app import SpecdeckApp
from tui.downloads.form import DownloadForm
from tui.downloads.pane import DownloadsPane
from tui.jobs.new_job import NewJobScreen
from tui.screens.host_key import HostKeyScreen


SMALL = (80, 24)


def bracket_depth(text):
    """The deepest nesting of round brackets in `text`: `2.38 GB (2.22 GiB)` is 1."""
    depth = deepest = 0
    for char in text:
        if char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth = max(0, depth - 1)
    return deepest


# ---------------------------------------------------------------------- the new-job form


async def open_new_job_form(pilot):
    await pilot.press("n")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, NewJobScreen), message="the new-job form")
    return pilot.app.screen


def field(app, name):
    return app.screen.query_one("#" + name, Input)


def form_error(app):
    return text_of(app.screen.query_one("#new-job-error", Static))


async def fill(pilot, name, text):
    """Focus a field and type into it (long paths are pasted: typing them costs seconds)."""
    widget = field(pilot.app, name)
    widget.focus()
    await pilot.pause()
    if len(text) > 40:
        widget.value = text
    else:
        await type_text(pilot, text)


async def test_new_job_form_has_env_interpreter_and_kind_refuses_bad_input_and_keeps_what_was_typed(agent_home, tmp_path):
    script = tmp_path / "greet.py"
    script.write_text("import os, sys\nprint('greeting=' + os.environ['GREETING'])\nprint('under=' + sys.executable)\n")
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SMALL) as pilot:
        await connected(pilot)
        form = await open_new_job_form(pilot)

        # The whole form fits 80x24: every field and the hint are on the screen.
        dialog = form.query_one("#new-job-dialog")
        assert dialog.region.y >= 0 and dialog.region.bottom <= SMALL[1]
        for widget in list(form.query(Input)) + [form.query_one("#kind", Select)]:
            assert widget.region.height == 1 and dialog.region.contains_region(widget.region), widget.id
        text = screen_text(app)
        for label in ("command", "name", "directory", "env", "interpreter", "kind", "escape cancels (what you typed is kept)"):
            assert label in text, label

        await fill(pilot, "command", str(script))
        await fill(pilot, "name", "greeter")
        await fill(pilot, "env", "GREETING")  # no '='
        await fill(pilot, "interpreter", sys.executable)
        # kind: command -> server -> training, with the keys
        form.query_one("#kind", Select).focus()
        await pilot.press("enter", "down", "down", "enter")
        assert form.query_one("#kind", Select).value == "training"
        field(app, "name").focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: form_error(app), message="the form's error line")
        assert isinstance(app.screen, NewJobScreen)
        assert form_error(app) == "env entry 'GREETING' is not KEY=VALUE" and app.focused is field(app, "env")
        assert "env entry 'GREETING' is not KEY=VALUE" in screen_text(app)

        field(app, "env").value = "GREETING='hello there"  # an unfinished quote
        await pilot.press("enter")
        await wait_until(pilot, lambda: form_error(app).startswith("cannot split the env entries"), message="the new error line")
        assert isinstance(app.screen, NewJobScreen)

        # Escape keeps what was typed: n shows it again.
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, NewJobScreen), message="escape to close the form")
        assert app.client.call("jobs.list")["jobs"] == []
        form = await open_new_job_form(pilot)
        assert field(app, "command").value == str(script) and field(app, "name").value == "greeter"
        assert field(app, "env").value == "GREETING='hello there" and field(app, "interpreter").value == sys.executable
        # The kind is not typed text: each form starts on `command`, as it shows.
        assert form.query_one("#kind", Select).value == "command"
        form.query_one("#kind", Select).focus()
        await pilot.press("enter", "down", "down", "enter")
        assert form.query_one("#kind", Select).value == "training"

        field(app, "env").value = "GREETING='hello there' OTHER=1"
        field(app, "env").focus()
        await pilot.press("enter")
        await wait_until(pilot, lambda: not isinstance(app.screen, NewJobScreen), message="the job to start")
        jobs = app.client.call("jobs.list")["jobs"]
        assert [(job["name"], job["kind"]) for job in jobs] == [("greeter", "training")]
        wait_for(lambda: app.client.call("jobs.get", {"id": jobs[0]["id"]})["state"] == "succeeded", 30)
        log = app.client.call("jobs.tail", {"id": jobs[0]["id"], "offset": 0})["text"]
        assert "greeting=hello there" in log and "under=" + sys.executable in log
        await wait_until(pilot, lambda: job_rows(app).get(jobs[0]["id"], {}).get("state") == "succeeded", message="the table")

        # Once a job has started from it, the form starts empty again.
        await open_new_job_form(pilot)
        assert field(app, "command").value == "" and field(app, "env").value == ""


async def test_new_job_refused_by_the_host_says_why_in_the_form_and_keeps_what_was_typed(agent_home, tmp_path):
    missing = str(tmp_path / "no-such-directory")
    app = SpecdeckApp(host="local")
    async with app.run_test(size=SMALL) as pilot:
        await connected(pilot)
        await open_new_job_form(pilot)
        await fill(pilot, "command", "echo hi")
        await fill(pilot, "cwd", missing)
        await pilot.press("enter")
        await wait_until(pilot, lambda: "does not exist" in form_error(app), message="the host's refusal in the form")
        assert isinstance(app.screen, NewJobScreen)
        assert missing in form_error(app) and "does not exist" in screen_text(app)
        assert field(app, "command").value == "echo hi" and field(app, "cwd").value == missing
        assert app.client.call("jobs.list")["jobs"] == []

        # Put right in place, it starts.
        field(app, "cwd").value = str(tmp_path)
        await pilot.press("enter")
        await wait_until(pilot, lambda: not isinstance(app.screen, NewJobScreen), message="the job to start")
        assert [job["cwd"] for job in app.client.call("jobs.list")["jobs"]] == [str(tmp_path)]


# ---------------------------------------------------------------------- downloads


def newest(pane):
    return max(pane.jobs, key=lambda job_id: int(job_id[1:]))


async def test_r_on_a_verify_job_that_found_a_file_wrong_downloads_only_that_file_again(client, hub, tmp_path):
    hub.add_repo("team/tiny-eagle3", small_drafter_files(tmp_path))
    local_dir = str(tmp_path / "tiny")
    first = client.call("download.start", {"repo": "team/tiny-eagle3", "local_dir": local_dir, "endpoint": hub.url}, timeout=120)
    wait_for(lambda: client.call("jobs.get", {"id": first["id"]})["state"] == "verified", 60)
    config_path = os.path.join(local_dir, "config.json")
    with open(config_path, "r+b") as f:
        f.write(b"[")  # a broken byte that only a download would put right
    check = client.call("download.verify", {"repo": "team/tiny-eagle3", "local_dir": local_dir, "endpoint": hub.url}, timeout=120)
    wait_for(lambda: client.call("jobs.get", {"id": check["id"]})["state"] == "mismatch", 60)
    served = hub.bytes_served("team/tiny-eagle3", "config.json")
    served_weights = hub.bytes_served("team/tiny-eagle3", "model.safetensors")

    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)
        # The newest download is selected (once the pane has drawn its rows).
        await wait_until(pilot, lambda: check["id"] in pane.jobs and pane.selected_id == check["id"], message="the newest download selected")
        pane.query_one("#downloads-jobs", DataTable).focus()
        await pilot.press("r")
        await wait_until(pilot, lambda: len(pane.jobs) == 3, timeout_s=60)
        again = newest(pane)
        await wait_until(pilot, lambda: text_of(pane.query_one("#downloads-status", Static)) == "repair started: %s (team/tiny-eagle3)" % again,
                         message="the status line saying the repair started")
        await wait_until(pilot, lambda: pane.jobs[again]["state"] == "verified", timeout_s=60)
        job = client.call("jobs.get", {"id": again})
        assert job["meta"]["action"] == "download" and job["meta"]["files"] == ["config.json"]
    with open(config_path, "rb") as f:
        assert f.read(1) == b"{"  # downloaded over, and verified
    assert hub.bytes_served("team/tiny-eagle3", "config.json") > served
    assert hub.bytes_served("team/tiny-eagle3", "model.safetensors") == served_weights  # the intact file was not fetched


async def test_a_download_that_failed_before_its_file_list_shows_its_error_and_no_bar(client, hub, tmp_path):
    local_dir = tmp_path / "here"
    local_dir.mkdir()
    failed = client.call("download.verify", {"repo": "team/gone", "local_dir": str(local_dir), "endpoint": hub.url}, timeout=120)
    wait_for(lambda: client.call("jobs.get", {"id": failed["id"]})["state"] == "failed", 60)
    app = DownloadsHost(client)
    async with app.run_test(size=SMALL) as pilot:
        pane = app.query_one(DownloadsPane)
        await wait_until(pilot, lambda: failed["id"] in pane.jobs and pane.selected_id == failed["id"])
        verdict = await wait_until(pilot, lambda: (lambda v: "team/gone not found" in v and v)(text_of(pane.query_one("#downloads-verdict", Static))),
                                  message="the verdict line")
        assert "team/gone not found" in verdict
        screen = await wait_until(pilot, lambda: (lambda t: "team/gone not found" in t and t)(screen_text(app)), message="the error on the screen")
        assert "resolving the file list" not in screen
        assert not pane.query_one("#downloads-total-row").display


# ---------------------------------------------------------------------- sizes


async def test_sizes_are_not_bracketed_twice_in_the_log_the_verdict_and_the_cli(client, hub, tmp_path):
    from tests.helpers.cli import run_cli
    from tests.hub_fixtures import blob

    hub.add_repo("team/weights", {"config.json": b"{}", "data.bin": blob(1_500_000, 1)})  # over 1 MB: a size in two units
    local_dir = str(tmp_path / "weights")
    spec = {"repo": "team/weights", "local_dir": local_dir, "endpoint": hub.url}
    for _ in range(2):  # the second finds the files already here
        job = client.call("download.start", spec, timeout=120)
        wait_for(lambda: client.call("jobs.get", {"id": job["id"]})["state"] == "verified", 60)
    log = run_cli("logs", "local", job["id"], check=0).stdout
    intact = [line for line in log.splitlines() if "data.bin: already here and intact" in line]
    assert intact and "1,500,000 bytes" in intact[0] and bracket_depth(intact[0]) == 1, log

    os.remove(os.path.join(local_dir, "data.bin"))
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)
        await wait_until(pilot, lambda: pane.selected_id == job["id"])
        pane.query_one("#downloads-jobs", DataTable).focus()
        await pilot.press("v")
        await wait_until(pilot, lambda: len(pane.jobs) == 3, timeout_s=60)
        check = newest(pane)
        await wait_until(pilot, lambda: pane.jobs[check]["state"] == "mismatch", timeout_s=60)
        verdict = text_of(pane.query_one("#downloads-verdict", Static))
        assert "data.bin: missing" in verdict and "1,500,000 bytes" in verdict and bracket_depth(verdict) == 1, verdict


# ---------------------------------------------------------------------- next steps in console terms

NO_HUB_PYTHON = "/usr/bin/python3"  # the system interpreter: no huggingface_hub


def cli_words(text):
    """The CLI's flags and commands found in `text` (none should reach the console)."""
    return re.findall(r"--[a-z][a-z-]+|specdeck config", text)


async def test_a_refused_host_key_says_press_r_not_a_flag_and_r_asks_again(sshd, host_python, tmp_path, monkeypatch):
    home = sshd.client_home(tmp_path, known_hosts=False)
    use_home(monkeypatch, home)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    app = SpecdeckApp(host="gpuhost", python=host_python)
    async with app.run_test(size=(120, 32)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, HostKeyScreen), message="the host key question")
        await pilot.press("n")
        await wait_until(pilot, lambda: app.connection_state == "failed", message="the refusal")
        header = header_text(app)
        assert "unknown host key" in header and sshd.host_fingerprint in header and "press r" in header
        said = [n.message for n in app._notifications]
        assert said and not cli_words(header + " ".join(said) + screen_text(app)), (header, said)
        assert sum("press r" in message for message in said) == 1  # said once, not twice
        await pilot.press("r")
        await wait_until(pilot, lambda: isinstance(app.screen, HostKeyScreen), message="r to ask again")


async def test_a_missing_huggingface_hub_points_to_the_forms_host_python(client, hub, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # nothing remembered
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)
        await pilot.press("n")
        await wait_until(pilot, lambda: isinstance(app.screen, DownloadForm))
        await fill_form(pilot, {"repo": "team/any", "local_dir": str(tmp_path / "any"), "endpoint": hub.url, "python": NO_HUB_PYTHON})
        error = app.screen.query_one("#form-error", Static)
        said = await wait_until(pilot, lambda: "not installed for" in text_of(error) and text_of(error), timeout_s=120)
        assert "huggingface_hub" in said and "host python above (remember keeps it for this host)" in said
        assert not cli_words(said), said
        await pilot.press("escape")

        # A verify under that interpreter fails inside its job: its error says what to do here, as does r.
        (tmp_path / "here").mkdir()
        failed = client.call("download.verify", {"repo": "team/any", "local_dir": str(tmp_path / "here"), "endpoint": hub.url,
                                                  "python": NO_HUB_PYTHON}, timeout=120)
        await wait_until(pilot, lambda: pane.jobs.get(failed["id"], {}).get("state") == "failed", timeout_s=60)
        verdict = text_of(pane.query_one("#downloads-verdict", Static))
        assert "not installed" in verdict and "host python field of the form n opens" in verdict
        assert not cli_words(verdict), verdict
        pane.query_one("#downloads-jobs", DataTable).focus()
        await pilot.press("r")
        refused = await wait_until(pilot, lambda: [n.message for n in app._notifications if "not installed" in n.message],
                                   timeout_s=120)
        assert "the form n opens" in refused[0] and not cli_words(refused[0]), refused


async def test_r_uses_the_interpreter_remembered_for_the_host_when_the_job_named_none(client, hub, tmp_path, monkeypatch):
    from tui import config

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    hub.add_repo("team/tiny-eagle3", small_drafter_files(tmp_path))
    first = client.call("download.start", {"repo": "team/tiny-eagle3", "local_dir": str(tmp_path / "d"), "endpoint": hub.url}, timeout=120)
    wait_for(lambda: client.call("jobs.get", {"id": first["id"]})["state"] == "verified", 60)
    assert first["meta"]["python"] is None
    config.remember("local", {"ml_python": sys.executable})  # as the form's remember box does
    app = DownloadsHost(client)
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(DownloadsPane)
        await wait_until(pilot, lambda: pane.selected_id == first["id"])
        pane.query_one("#downloads-jobs", DataTable).focus()
        await pilot.press("r")
        await wait_until(pilot, lambda: len(pane.jobs) == 2, timeout_s=60)
        again = client.call("jobs.get", {"id": newest(pane)})
        assert again["meta"]["python"] == sys.executable and again["meta"]["action"] == "download"
