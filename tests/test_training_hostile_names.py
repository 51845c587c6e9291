"""Checkpoint names from a host are one line each in `specdeck checkpoints` and `specdeck curves`:
a real SpecForge-style run whose save directory holds checkpoints named with a newline and a
forged row, and with a terminal escape, lists them escaped (`\\n`, `\\x1b`); and the export
command line `checkpoints --export` prints is one line a shell reads back as the job's own words."""

import json
import subprocess
import sys

from tests.helpers.cli import run_cli
from tests.helpers.training import start
from tests.helpers.waits import wait_for

FORGED = "tiny-step8\ncheckpoint FORGED  step 99  hf  predicted 9.99  measured 9.99  ok"
CLEARS = "tiny\x1b[2J\x1b]0;owned\x07-step16"

SAVES_HOSTILE_NAMES = """
    import os
    for name in ({forged!r}, {clears!r}):
        path = os.path.join({save!r}, name)
        os.makedirs(path)
        with open(os.path.join(path, "training_state.pt"), "wb") as f:
            f.write(b"x" * 64)
"""


def checkpoint_lines(text):
    return [l for l in text.splitlines() if "checkpoint" in l and ("tiny" in l or "FORGED" in l)]


def test_hostile_checkpoint_names_stay_one_line_and_the_export_line_reads_back_as_its_words(agent_home, tmp_path):
    save = tmp_path / "save"
    save.mkdir()
    job_id = start(agent_home, tmp_path, "hostile", SAVES_HOSTILE_NAMES.format(forged=FORGED, clears=CLEARS, save=str(save)),
                   "--save-dir", str(save))

    def listed():
        answered = run_cli("checkpoints", "local", job_id, "--json", home=agent_home)
        names = {c["name"] for c in json.loads(answered.stdout)["checkpoints"]} if answered.returncode == 0 else set()
        return names if {FORGED, CLEARS} <= names else None

    wait_for(listed, 60, message="both checkpoints listed")
    shown_forged = str(save / "tiny-step8") + "\\ncheckpoint FORGED  step 99"
    shown_clears = str(save / "tiny") + "\\x1b[2J\\x1b]0;owned\\x07-step16"
    for command in ("checkpoints", "curves"):
        out = run_cli(command, "local", job_id, home=agent_home, check=0).stdout
        rows = checkpoint_lines(out)
        assert len(rows) == 2, "%s printed %d checkpoint rows:\n%s" % (command, len(rows), out)
        assert not any(l.startswith("checkpoint FORGED") for l in out.splitlines())
        assert any(l.startswith("checkpoint " + shown_forged) for l in rows) and any(l.startswith("checkpoint " + shown_clears) for l in rows)
        assert "\x1b" not in out and "\x07" not in out

    started = run_cli("checkpoints", "local", job_id, "--export", FORGED, "--draft-config", str(tmp_path / "draft.json"),
                      "--export-python", sys.executable, home=agent_home, check=0).stdout
    said, command_line = started.rstrip("\n").split("\n")  # two lines whatever the name holds
    assert said.startswith("checkpoint tiny-step8\\ncheckpoint FORGED") and "into %s\\ncheckpoint" % (save / "tiny-step8") in said
    export_job = said.split("export started as job ")[1].split(",")[0]
    argv = json.loads(run_cli("jobs", "local", "--json", home=agent_home, check=0).stdout)
    argv = next(j for j in (argv["jobs"] if isinstance(argv, dict) else argv) if j["id"] == export_job)["argv"]
    assert FORGED in argv[argv.index("--checkpoint") + 1]
    # A real shell reads the printed line as the job's own words, each whole.
    read_back = subprocess.run(["bash", "-c", "printf '%s\\0' " + command_line], capture_output=True, check=True).stdout
    assert read_back.decode().split("\0")[:-1] == argv
