"""Pre-serve checks: how a drafter would be served against what it is, each finding with the
symptom it would cause. `serving.start` refuses a server with an error finding (unless forced)
and `specdeck doctor` reports them all:

- the loading checks `compare` makes (compatibility.check_against_target: fc's 3 x hidden
  against the target, the vocabularies d2t maps into, the aux layer ids) and the drafter's own
  shape and vocabulary-map problems that `inspect` reports (eagle3.py), from the same code;
- the method the engine is told against what the drafter is: an EAGLE-3 drafter (fc fuses 3 x
  the target's hidden size) told `eagle` loads as an EAGLE-1 head fed one hidden state, and
  every draft is rejected (accept length 1.00);
- the drafter's max_position_embeddings against the served context (--max-model-len);
- the sampling the server applies by default: vLLM drafts greedily and keeps no draft
  probabilities, so at temperature T > 0 a draft is accepted with the target's probability of it
  at T (rejection sampling with q = 1), and top-p / top-k reject any draft outside what they keep.
  Requests that send no temperature get the target's generation_config.json defaults
  (vLLM's `--generation-config auto`) or `--override-generation-config`.

Standard library only: reads config.json files (model_files.py: regular files of a bounded size
only, one line when one cannot be read) and the engine's argument list.
"""

import json
import os

from ..checkpoints import compatibility
from ..checkpoints.formats import effective_config, int_field
from ..core.protocol import RemoteError
from . import engines
from .model_files import read_model_json

EAGLE3_METHODS = ("eagle3", "EAGLE3")
ERROR, WARNING, OK = "error", "warning", "ok"


def finding(check, severity, message):
    return {"check": check, "severity": severity, "message": message}


def _flag_values(argv, flag):
    """Every value of `flag` in an argument list (`--flag V` and `--flag=V`; dashes or underscores)."""
    names = (flag, flag.replace("-", "_").replace("__", "--", 1))
    values = []
    for index, arg in enumerate(argv):
        for name in names:
            if arg == name and index + 1 < len(argv):
                values.append(argv[index + 1])
            elif arg.startswith(name + "="):
                values.append(arg[len(name) + 1:])
    return values


def _last_json(argv, flag):
    for text in reversed(_flag_values(argv, flag)):
        try:
            value = json.loads(text)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def told_method(engine, argv):
    """The speculative method the engine reads from its command line (the last one given wins,
    as with the engines' own parsers), or None when none is named."""
    if engine == "sglang":
        values = _flag_values(argv, "--speculative-algorithm")
        return values[-1] if values else None
    config = _last_json(argv, "--speculative-config")
    return config.get("method") if config and isinstance(config.get("method"), str) else None


def max_model_len(argv):
    for flag in ("--max-model-len", "--context-length"):
        values = _flag_values(argv, flag)
        if values:
            try:
                return int(values[-1])
            except ValueError:
                return None
    return None


def _fc_inputs(report):
    fc = next((t for t in report.get("tensors") or () if t.get("name", "").endswith("fc.weight")), None)
    return fc["shape"][1] if fc and len(fc.get("shape") or ()) == 2 else None


def method_findings(engine, method, drafter_report, target_config):
    target_hidden = int_field(compatibility._target_text_config(target_config or {}), "hidden_size")
    target_hidden = target_hidden or (drafter_report.get("eagle3") or {}).get("target_hidden_size")
    fc_inputs = _fc_inputs(drafter_report)
    is_eagle3 = drafter_report.get("eagle3") is not None or bool(fc_inputs and target_hidden and fc_inputs == 3 * target_hidden)
    what = ("fc.weight fuses 3 x %d target hidden states: an EAGLE-3 drafter" % target_hidden
            if fc_inputs and target_hidden and fc_inputs == 3 * target_hidden else "an EAGLE-3 drafter")
    if method is None:
        return [finding("method", WARNING, "the engine is told no speculative method: it serves without the drafter")]
    if not is_eagle3:
        return [finding("method", OK, "not an EAGLE-3 drafter: method %s not judged" % method)]
    if method not in EAGLE3_METHODS:
        return [finding("method", ERROR, "the engine is told method %r, but %s; served so it is loaded as another kind of "
                        "head and rejects every draft: accept length 1.00 (tell it eagle3)" % (method, what))]
    return [finding("method", OK, "method %s fits the drafter (%s)" % (method, what))]


def context_findings(drafter_config, served_len, target_config):
    positions = int_field(effective_config(drafter_config or {}), "max_position_embeddings")
    if served_len is None:
        served_len = int_field(compatibility._target_text_config(target_config or {}), "max_position_embeddings")
        where = "the target's max_position_embeddings (no --max-model-len)"
    else:
        where = "--max-model-len"
    if positions is None or served_len is None:
        return [finding("max_position_embeddings", OK, "the drafter's context was not checked (%s not known)" % (
            "its max_position_embeddings" if positions is None else "the served context"))]
    if positions < served_len:
        return [finding("max_position_embeddings", WARNING,
                        "the drafter was made for %d positions but the server serves %d (%s): past position %d its "
                        "rotary embeddings are extrapolated and acceptance falls on long prompts (or the engine refuses "
                        "to start)" % (positions, served_len, where, positions))]
    return [finding("max_position_embeddings", OK, "the drafter's %d positions cover the served %d" % (positions, served_len))]


def sampling_findings(engine, argv, target, temperature=None):
    """Sampling the requests will get: `temperature` (what clients send), else the server's
    defaults (--override-generation-config, else the target's generation_config.json unless
    `--generation-config vllm`)."""
    settings, source = {}, None
    generation = _flag_values(argv, "--generation-config")
    if engine == "vllm" and (not generation or generation[-1] == "auto"):
        settings = dict((k, v) for k, v in (read_model_json(target, "generation_config.json") or {}).items()
                        if k in ("temperature", "top_p", "top_k"))
        source = "the target's generation_config.json" if settings else None
    override = _last_json(argv, "--override-generation-config") if engine == "vllm" else None
    if override:
        settings.update((k, v) for k, v in override.items() if k in ("temperature", "top_p", "top_k"))
        source = "--override-generation-config"
    if temperature is not None:
        settings["temperature"], source = temperature, "the requests"
    found = []
    value = settings.get("temperature")
    if isinstance(value, (int, float)) and value > 0:
        found.append(finding("temperature", WARNING,
                             "temperature %g (from %s): the drafter drafts greedily and the engine keeps no draft "
                             "probabilities, so a draft is accepted only with the target's probability of it at that "
                             "temperature; accept length falls below what greedy decoding (temperature 0) gives%s" % (
                                 value, source, " (requests that send a temperature of their own are not affected)"
                                 if source != "the requests" else "")))
    top_p, top_k = settings.get("top_p"), settings.get("top_k")
    if isinstance(value, (int, float)) and value > 0 and ((isinstance(top_p, (int, float)) and top_p < 1) or
                                                          (isinstance(top_k, int) and top_k > 0)):
        found.append(finding("top_p_top_k", WARNING, "top_p %s, top_k %s (from %s): a draft outside the tokens they keep is "
                             "always rejected, so acceptance falls further" % (top_p, top_k, source)))
    return found or [finding("temperature", OK, "greedy sampling by default: acceptance is not cut by sampling")]


def examine(engine, argv, target, drafter, drafter_report, temperature=None):
    """`{status, findings: [{check, severity, message}]}`: status is the worst severity found."""
    target_config = read_model_json(target, "config.json")
    findings = []
    if target_config is not None:
        verdict = compatibility.check_against_target(drafter_report, target_config)
        findings += [finding(c["check"], OK if c["ok"] else ERROR, c["message"]) for c in verdict["checks"]]
    else:
        findings.append(finding("target", OK, "the target has no config.json here (a hub id?): loading checks skipped"))
    # The drafter's own shape and vocabulary-map checks (eagle3.py, vocab_maps.py), as inspect reports them.
    findings += [finding("checkpoint", ERROR if p.get("level") == "error" else WARNING, p["message"])
                 for p in drafter_report.get("problems") or () if p.get("level") in ("error", "warning")]
    findings += method_findings(engine, told_method(engine, argv), drafter_report, target_config)
    findings += context_findings(drafter_report.get("config"), max_model_len(argv), target_config)
    findings += sampling_findings(engine, argv, target, temperature)
    severities = [f["severity"] for f in findings]
    status = ERROR if ERROR in severities else (WARNING if WARNING in severities else OK)
    return {"status": status, "findings": findings}


def examine_serve(spec, argv, temperature=None):
    from ..checkpoints import report

    try:
        drafter_report = report.inspect(os.path.expanduser(spec["drafter"]))
    except (OSError, ValueError) as exc:
        raise RemoteError("DrafterMismatch", "could not read the drafter to check it: %s" % exc)
    return examine(spec["engine"], argv, spec["target"], spec["drafter"], drafter_report, temperature)


def gate(spec, argv, force):
    """Before a server starts (after engines.check_drafter, the loading checks in compare's
    words): the doctor's findings (None without a drafter, or for one given by hub id); its errors refuse the start
    (DrafterMismatch, each with its symptom) unless `force`."""
    if not spec.get("drafter"):
        return None
    if not engines.looks_like_path(spec["drafter"]) and not os.path.exists(os.path.expanduser(spec["drafter"])):
        return None  # a hub id: the engine downloads it, nothing on this host to examine
    result = examine_serve(spec, argv)
    errors = [f["message"] for f in result["findings"] if f["severity"] == ERROR]
    if errors and not force:
        raise RemoteError("DrafterMismatch", "refused (serve --force starts it anyway): %s" % "; ".join(errors))
    return result
