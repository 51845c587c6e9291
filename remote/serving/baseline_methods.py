"""Wire methods of acceptance baselines: save a server's figures as its pair's, list, remove."""

from ..core.protocol import BadRequest, NotFound
from ..core.wire import method
from . import baselines
from .baselines import STORE


def _server_pair(call, server_id):
    if not server_id.startswith("u") and call.daemon.jobs.describe(server_id)["kind"] != "server":
        raise BadRequest("job %s is not a server" % server_id)  # (describe: NotFound for no such job)
    key = STORE.pair_of(call.daemon, server_id)
    if key is None:
        raise BadRequest("server %s has no drafter (a baseline server): no accept length to keep" % server_id)
    return key


def _listed(entry):
    return dict(baselines.view(entry), target=entry["target"], drafter=entry["drafter"], url=entry["url"], **{"from": entry["from"]})


@method("serving.save_baseline")
def serving_save_baseline(call):
    """Keep a server's accept length and per-position rates as the baseline of its (target,
    drafter) pair (an attached server's: of its URL), on the host (baselines.json in its state
    directory), where the `acceptance_regression` alert is raised. Params: `id` (a server job or
    an attached server `uN`), `window_s` (the figures' window; absent: the server's whole life),
    `margin` (a fraction, default 0.1: a live accept length more than this under the baseline
    counts), `for_s` (how long it must stay under before it is told, default 600). Reply: `{id,
    target, drafter, url, baseline: {accept_length, per_position, saved_at, margin, for_s}}`.
    A server with no drafts in the window is BadRequest (nothing measured to keep)."""
    from .methods import _window_figures  # (the one way a server's figures are taken)

    server_id = call.param("id", str, required=True)
    key = _server_pair(call, server_id)
    figures = _window_figures(call, server_id, call.param("window_s", float))
    if not figures.get("num_drafts") or figures.get("accept_length") is None:
        raise BadRequest("server %s has drafted nothing%s: send it requests first" % (
            server_id, " in the window" if call.param("window_s", float) else " yet"))
    try:
        entry = STORE.save(key, figures["accept_length"], figures.get("per_position"), call.param("margin", float, baselines.DEFAULT_MARGIN),
                           call.param("for_s", float, baselines.DEFAULT_FOR_S), server_id)
    except ValueError as exc:
        raise BadRequest(str(exc))
    return {"id": server_id, "target": key[0], "drafter": key[1], "url": key[2], "baseline": baselines.view(entry)}


@method("serving.baselines")
def serving_baselines(call):
    """The saved baselines. Params: none. Reply: `{baselines: [{target, drafter, url,
    accept_length, per_position, saved_at, margin, for_s, from}]}` (`from`: the server they
    were taken from), oldest saved first."""
    return {"baselines": [_listed(entry) for entry in STORE.entries()]}


@method("serving.remove_baseline")
def serving_remove_baseline(call):
    """Remove a saved baseline. Params: `id` (a server: its pair's), or `target` and `drafter`,
    or `url` (an attached server's). Reply: `{removed: true}`; NotFound when none is kept for it."""
    server_id, url = call.param("id", str), call.param("url", str)
    target, drafter = call.param("target", str), call.param("drafter", str)
    if server_id:
        key = _server_pair(call, server_id)
    else:
        key = baselines.pair_key(target, drafter, url)
        if key is None:
            raise BadRequest("give a server (id), target and drafter, or url")
    if not STORE.remove(key):
        raise NotFound("no baseline kept for %s" % (server_id or url or "%s + %s" % (target, drafter)))
    return {"removed": True}
