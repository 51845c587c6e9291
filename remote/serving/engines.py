"""How each engine is started and asked whether it is up: the command line of a vLLM or SGLang
server (with an EAGLE-3 drafter, or a baseline without one), its health and metrics URLs, the
drafter check that refuses a drafter the target cannot load, and the lines of a log that say why
a server died while starting."""

import json
import os
import re
import subprocess
import urllib.error
import urllib.request

from ..core.protocol import BadRequest, NotFound, RemoteError
from . import root_cause

ENGINES = ("vllm", "sglang")
DEFAULT_PORT = 8000
# Lines that name why a server died: the first one of these near the end of its log.
_REASON = re.compile(
    r"(out of memory|OutOfMemoryError|size mismatch|shape|Error:|Exception:|error:|No such file|not found|"
    r"Address already in use|Traceback)", re.IGNORECASE)


def server_argv(engine, target, drafter=None, k=3, port=DEFAULT_PORT, host="127.0.0.1", engine_args=()):
    """The engine's command line, to run under the job's interpreter (`python -m ...`),
    listening on `host` (location.listen_host: loopback here, every interface on a compute node)."""
    if engine == "vllm":
        argv = ["-m", "vllm.entrypoints.cli.main", "serve", target, "--host", host, "--port", str(port)]
        if drafter:
            config = {"method": "eagle3", "model": drafter, "num_speculative_tokens": int(k)}
            argv += ["--speculative-config", json.dumps(config)]
    elif engine == "sglang":
        argv = ["-m", "sglang.launch_server", "--model-path", target, "--host", host, "--port", str(port), "--enable-metrics"]
        if drafter:
            # One chain of K drafts (topk 1), as vLLM's num_speculative_tokens: K steps, K+1 tokens verified.
            argv += ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", drafter,
                     "--speculative-num-steps", str(int(k)), "--speculative-eagle-topk", "1",
                     "--speculative-num-draft-tokens", str(int(k) + 1)]
    else:
        raise BadRequest("engine must be one of %s, not %r" % (", ".join(ENGINES), engine))
    return argv + list(engine_args)


QUIET_FLAG = "--disable-access-log-for-endpoints"
_QUIET_SUPPORT = {}  # interpreter -> whether its vLLM has QUIET_FLAG


def quiet_scrape_args(engine, interpreter, engine_args=()):
    """Arguments that keep our once-a-second `GET /metrics` out of the server's log (a third of
    a vLLM log's lines otherwise), for a vLLM that has the option (0.11 and later); the user's
    own requests are still logged. Nothing for other engines, older vLLMs, or when the user set it."""
    if engine != "vllm" or any(str(a).startswith(QUIET_FLAG) for a in engine_args):
        return []
    if interpreter not in _QUIET_SUPPORT:
        _QUIET_SUPPORT[interpreter] = _vllm_has_quiet_flag(interpreter)
    return [QUIET_FLAG, "/metrics,/metrics/"] if _QUIET_SUPPORT[interpreter] else []


def _vllm_has_quiet_flag(interpreter):
    """Whether the vLLM that `interpreter` imports declares the option."""
    return vllm_declares(interpreter, "disable_access_log_for_endpoints",
                         ("entrypoints/launchers/cli_args.py", "entrypoints/openai/cli_args.py"))


def vllm_declares(interpreter, name, relatives):
    """Whether the vLLM that `interpreter` imports has `name` in one of its source files
    (`relatives`, under the package), read from its source: finding the package does not import
    it (vLLM takes seconds to import)."""
    probe = "import importlib.util; s = importlib.util.find_spec('vllm'); print(list(s.submodule_search_locations)[0] if s else '')"
    try:
        found = subprocess.run([interpreter, "-c", probe], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    if not found:
        return False
    for relative in relatives:
        try:
            with open(os.path.join(found, relative), encoding="utf-8", errors="replace") as f:
                if name in f.read():
                    return True
        except OSError:
            continue
    return False


def server_env(gpus=None, extra=None):
    env = dict(extra or {})
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return env


def base_url(port, host="127.0.0.1"):
    host = "[%s]" % host if ":" in host else host  # an IPv6 address (a node's NodeAddr)
    return "http://%s:%d" % (host, int(port))


def http_get(url, timeout_s=2.0):  # health checks only: /metrics is read by scrape.py
    """(status, body bytes) of a GET; status None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read() if exc.fp else b""
    except (OSError, ValueError):
        return None, b""


def is_ready(url, timeout_s=2.0):
    status, _ = http_get(url.rstrip("/") + "/health", timeout_s)
    return status == 200


def looks_like_path(name):
    """Whether a model name is a path on the host rather than a hub id (`org/name`, `gpt2`):
    absolute, under ~, relative with ./ or ../, or more than one slash deep."""
    return name.startswith(("/", "~", "./", "../")) or name in (".", "..") or name.count("/") > 1


def check_paths(target, drafter=None):
    """NotFound, in one line, for a target or drafter given as a path that is not on the host:
    refused here rather than after the engine has spent a minute starting."""
    for role, name in (("target model", target), ("drafter", drafter)):
        if name and looks_like_path(name) and not os.path.exists(os.path.expanduser(name)):
            raise NotFound("no %s at %s on the host" % (role, name))


def check_drafter(target, drafter):
    """Refuse a drafter that cannot serve the target: RemoteError("DrafterMismatch") with the
    reasons of the checkpoint comparison. Returns the verdict (None when the target is not a
    local directory with a config.json, e.g. a hub id: nothing to compare against here)."""
    from ..checkpoints import compatibility, report
    from .model_files import read_model_json

    target_config = read_model_json(target, "config.json")
    if target_config is None:
        return None
    if not os.path.exists(os.path.expanduser(drafter)):
        raise RemoteError("NotFound", "no drafter at %s on the host" % drafter)
    try:
        drafter_report = report.inspect(os.path.expanduser(drafter))
    except (OSError, ValueError) as exc:
        raise RemoteError("DrafterMismatch", "could not read the checkpoints to compare them: %s" % exc)
    verdict = compatibility.check_against_target(drafter_report, target_config)
    if verdict["verdict"] != "compatible":
        raise RemoteError("DrafterMismatch", "the drafter cannot load with this target: %s" % "; ".join(verdict["reasons"]))
    return verdict


def death_reason(log_text, max_lines=20):
    """(reason line or None, the last lines) of a server's log after it died: the engine's
    first error (root_cause.py), else the last line near the end that says why."""
    lines = [line for line in log_text.splitlines() if line.strip()]
    tail = lines[-max_lines:]
    first = root_cause.first_error(log_text)
    if first:
        return first, tail
    for line in reversed(lines[-200:]):
        if _REASON.search(line) and not line.lstrip().startswith("File "):
            return line.strip(), tail
    return (tail[-1].strip() if tail else None), tail
