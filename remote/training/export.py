"""`specforge export` of a SpecForge checkpoint, as a job the user asks for (training.export).

SpecForge 0.2.0 saves training state only (`{run_id}-step{N}/training_state.pt`); its CLI makes a
servable model directory of one: `specforge export --to hf|sglang --checkpoint DIR --draft-config
JSON --output-dir DIR [--vocab-mapping PT] [--embedding-source TARGET]`, written by
save_pretrained (config.json + model.safetensors). The draft config and the vocabulary mapping
default to what the run was given (`model.draft_model_config=...`, `model.vocab_mapping_path=...`
among its overrides); the command is the run's own SpecForge (`PY -m specforge.cli` when the run
was started so), else `specforge` on the PATH the run had, with the run's environment additions.

The output goes into the save directory (`{name}-{to}` beside the checkpoint), where the run's
watcher lists it once the export job has ended, as an inspectable safetensors checkpoint that
keeps its source's step and prediction. The export's state lives in the source checkpoint's
entry (`export`: {state running|done|failed, job, to, output_dir, argv, error}), so a restarted
daemon follows it on.
"""

import os

from ..core.protocol import BadRequest, RemoteError
from ..core.records import read_json
from ..core.words import LIVE_STATES as LIVE
from . import checkpoints

TARGETS = ("hf", "sglang")
RUN_OVERRIDES = {"draft_config": "model.draft_model_config=", "vocab_mapping": "model.vocab_mapping_path="}
OPTIONS = ("to", "draft_config", "vocab_mapping", "embedding_source", "python")


def _override(argv, prefix):
    """The value of a `section.field=value` override in the run's argv, or None."""
    for word in argv:
        if isinstance(word, str) and word.startswith(prefix) and len(word) > len(prefix):
            return word[len(prefix):]
    return None


def command(run_argv, python=None):
    """The words that start SpecForge's CLI: `python -m specforge.cli` (given, or the run's own
    interpreter when it ran the module so), the run's `specforge` script, else `specforge`."""
    if python:
        return [python, "-m", "specforge.cli"]
    for index, word in enumerate(run_argv[:-1]):
        if word == "-m" and run_argv[index + 1] in ("specforge.cli", "specforge"):
            return run_argv[:index + 2]
    if run_argv and os.path.basename(run_argv[0]) == "specforge":
        return [run_argv[0]]
    return ["specforge"]


def plan(run_job, entry, params):
    """{argv, to, output_dir, env} of the export of one checkpoint entry (BadRequest when it cannot be)."""
    if entry.get("format") != checkpoints.SPECFORGE_FORMAT:
        raise BadRequest("checkpoint %s is not a SpecForge training state (%s): nothing to export" % (
            entry["name"], entry.get("format") or entry.get("verdict")))
    if (entry.get("export") or {}).get("state") == "running":
        raise BadRequest("checkpoint %s is being exported already (job %s)" % (entry["name"], entry["export"]["job"]))
    unknown = sorted(set(params) - set(OPTIONS))
    if unknown:
        raise BadRequest("unknown export option(s): %s" % ", ".join(unknown))
    to = params.get("to") or "hf"
    if to not in TARGETS:
        raise BadRequest("export to must be hf or sglang, not %r" % (to,))
    argv = list(run_job.get("argv") or [])
    options = {key: params.get(key) or _override(argv, prefix) for key, prefix in RUN_OVERRIDES.items()}
    if not options["draft_config"]:
        raise BadRequest("the run's argv names no model.draft_model_config=...: give the draft config (--draft-config JSON)")
    if params.get("embedding_source") and to != "hf":
        raise BadRequest("an embedding source is for --to hf only")
    output_dir = os.path.join(os.path.dirname(entry["path"]), "%s-%s" % (entry["name"], to))
    if os.path.lexists(output_dir):
        raise BadRequest("%s exists already: move it away to export again" % output_dir)
    words = command(argv, params.get("python")) + ["export", "--to", to, "--checkpoint", entry["path"],
                                                    "--draft-config", options["draft_config"], "--output-dir", output_dir]
    if options["vocab_mapping"]:
        words += ["--vocab-mapping", options["vocab_mapping"]]
    if params.get("embedding_source"):
        words += ["--embedding-source", params["embedding_source"]]
    return {"argv": words, "to": to, "output_dir": output_dir}


def run_env(daemon, run_job):
    """The environment additions the run was started with (PYTHONPATH of a carried SpecForge)."""
    spec = read_json(os.path.join(daemon.jobs.job_dir(run_job["id"]), "job.json")) or {}
    env = spec.get("env") if isinstance(spec, dict) else None
    return dict(env) if isinstance(env, dict) else {}


def start(daemon, run_job, entry, params):
    """Start the export job; the record to keep in the entry's `export`."""
    planned = plan(run_job, entry, params)
    job = daemon.jobs.submit(planned["argv"], cwd=os.path.dirname(entry["path"]), env=run_env(daemon, run_job),
                             name="specforge export %s --to %s" % (entry["name"], planned["to"]), kind="export",
                             meta={"training_job": run_job["id"], "checkpoint": entry["name"], "output_dir": planned["output_dir"]})
    return dict(planned, state="running", job=job["id"], error=None)


def pending(entries):
    return any((e.get("export") or {}).get("state") == "running" for e in entries)


def busy_names(entries):
    """Names of output directories an export still writes (the watcher leaves them for later)."""
    return {os.path.basename(e["export"]["output_dir"]) for e in entries if (e.get("export") or {}).get("state") == "running"}


def advance(daemon, entries):
    """The entries whose export job ended since the last look (done, or failed and why)."""
    changed = []
    for entry in entries:
        export = entry.get("export") or {}
        if export.get("state") != "running":
            continue
        try:
            job = daemon.jobs.describe(export["job"])
        except RemoteError as exc:  # the export job was removed
            export.update(state="failed", error=exc.message)
            changed.append(entry)
            continue
        if job["process_state"] in LIVE:
            continue
        made = os.path.isfile(os.path.join(export["output_dir"], "config.json"))
        if job.get("exit_code") == 0 and made:
            export.update(state="done")
        else:
            said = last_words(daemon, export["job"])
            export.update(state="failed", error="specforge export ended (%s, exit %s)%s%s; see `specdeck logs HOST %s`" % (
                job["process_state"], job.get("exit_code"), "" if made else " without writing config.json",
                ": %s" % said if said else "", export["job"]))
        changed.append(entry)
    return changed


def last_words(daemon, job_id, max_bytes=4096, max_chars=300):
    """The last line an ended job printed (SpecForge's exception, as a rule), at most
    `max_chars` of it, read from the log's last `max_bytes`; None when it printed nothing."""
    try:
        text = daemon.jobs.tail(job_id, -max_bytes, max_bytes)["text"]
    except (OSError, RemoteError):
        return None
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1][:max_chars] if lines else None


def source_of(entries, entry):
    """The SpecForge checkpoint `entry` (a directory just inspected) was exported from, or None."""
    for source in entries:
        export = source.get("export") or {}
        if export.get("output_dir") and checkpoints.inside(os.path.realpath(export["output_dir"]), entry["path"]):
            return source
    return None
