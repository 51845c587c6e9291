"""The host model (tui/host/): panes are views of it. A reconnect resumes every pane's stream
through the model, on the new client, from where it was; and no view reaches into the app or
into another widget (it reads what it is given and posts messages up)."""

import ast
import pathlib

import textual.app

from tests.helpers.waits import wait_until
from tui.app import SpecdeckApp
from tui.transport.connection import open_client
from tui.messages import ConnectionChanged
from tui.pane import Pane

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tui"
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}  # public, despite the underscore
APP_MODULES = {ROOT / "app.py", ROOT / "pane_host.py"}  # the apps themselves: they own what they hold


def reaches(path, app_api):
    """`self.app.X` where X is not what every Textual App has (the console's own attributes:
    its header, its hosts), and `other._private` of anything but self."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if (path not in APP_MODULES and isinstance(value, ast.Attribute) and value.attr == "app"
                and isinstance(value.value, ast.Name) and value.value.id == "self" and node.attr not in app_api):
            found.append("%s:%d self.app.%s" % (path.relative_to(ROOT), node.lineno, node.attr))
        if node.attr.startswith("_") and not node.attr.startswith("__") and node.attr not in NAMEDTUPLE_API:
            own = isinstance(value, ast.Name) and value.id in ("self", "cls")
            parent = isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"
            if not own and not parent:
                found.append("%s:%d %s" % (path.relative_to(ROOT), node.lineno, ast.unparse(node)))
    return found


def test_no_view_reaches_into_the_app_or_another_widget():
    app_api = {name for name in dir(textual.app.App()) if not name.startswith("_")}
    views = [path for path in sorted(ROOT.rglob("*.py")) if "textual" in path.read_text()]
    assert len(views) > 20  # the panes, screens and widgets were found
    found = [reach for path in views for reach in reaches(path, app_api)]
    assert found == []


def following(app, client):
    """The streams of the host's model that should run (their pane shown, or one that runs
    hidden) and those of them that run on `client`."""
    due = [stream for stream in app.model.streams if stream.pane.active or stream.while_hidden]
    return due, [stream for stream in due if stream.subscription is not None and stream.subscription.client is client]


async def test_after_r_every_pane_follows_its_streams_again_on_the_new_client(agent_home):
    clients = []

    def connect(name, on_state, ask_host_key):
        clients.append(open_client("local", on_state=on_state))
        return clients[-1]

    app = SpecdeckApp(connect=connect)
    async with app.run_test(size=(110, 32)) as pilot:
        methods = {"telemetry.follow", "telemetry.alerts_follow"}  # the GPUs pane's: its samples, and alerts that ring anywhere
        await wait_until(pilot, lambda: clients and {stream.method for stream in following(app, clients[0])[1]} == methods
                         and following(app, clients[0])[0] == following(app, clients[0])[1], message="the GPUs pane following")
        # The client gave up on its link: every pane is told (the state handed down by the app).
        app.post_message(ConnectionChanged("failed", {"error": "the link was cut"}, host="local"))
        await wait_until(pilot, lambda: all(pane.connection.error == "the link was cut" for pane in app.query(Pane)),
                         message="every pane told of the failure")
        await pilot.press("r")
        await wait_until(pilot, lambda: len(clients) == 2 and following(app, clients[1])[0] == following(app, clients[1])[1],
                         message="the streams resumed on the new client")
        assert {stream.method for stream in following(app, clients[1])[1]} == methods
        assert all(pane.connection.state == "connected" for pane in app.query(Pane))
        await pilot.press("5")  # a pane shown after the reconnect starts its streams on the new client too
        await wait_until(pilot, lambda: "serving.follow" in {s.method for s in following(app, clients[1])[1]} and app.model.alerts_followed,
                         message="the Speculation pane following, and the host's alerts on the new client")
        assert following(app, clients[1])[0] == following(app, clients[1])[1]
        assert not any(stream.subscription is not None and stream.subscription.client is clients[0] for stream in app.model.streams)
