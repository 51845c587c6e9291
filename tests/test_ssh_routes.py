"""Reaching a host exactly where the user's own ssh would: every route and every config kind
below is held against where the connection landed, in the words of the sshd that took it (its
own log's `Accepted publickey for USER`), never only against "it connected".

The hosts: a network namespace whose sshds listen on addresses only the namespace can reach
(127.0.0.2, 127.0.0.3 on its own loopback), and a first hop that is the only one reachable from
here, allowed (PermitOpen) to open the second hop and nothing else; the second hop may open
the target only. A route that skips a hop, or asks the wrong hop for the target, is refused by
sshd itself.
"""

import os
import uuid
from pathlib import Path

import pytest

from tests.helpers.cli import run_cli, ssh_config_env, use_home
from tests.helpers.pilot import header_text
from tests.helpers.waits import wait_until
from tests.sshd_fixtures import _start_sshd

HOP2, TARGET = "127.0.0.2", "127.0.0.3"


def logins(server):
    return server.log_text().count("Accepted publickey for %s " % server.user)


def landed(server, before):
    """The sshd took one more login, for the test user (its own word)."""
    return logins(server) == before + 1


@pytest.fixture
def chain(netns_host, ssh_keys, host_user, tmp_path):
    """hop1 (reachable from here, may open hop2 only) -> hop2 (may open the target only) -> target."""
    servers = {}
    plan = [("hop1", netns_host.host, 2200, "PermitOpen %s:22\n" % HOP2),
            ("hop2", HOP2, 22, "PermitOpen %s:22\n" % TARGET),
            ("target", TARGET, 22, "AllowTcpForwarding no\n")]
    try:
        for name, listen, port, lines in plan:
            confdir = tmp_path / ("sshd-" + name)
            confdir.mkdir()
            confdir.chmod(0o755)
            server, log = _start_sshd(keys=ssh_keys, user=host_user, confdir=confdir, listen=listen, port=port,
                                      prefix=("ip", "netns", "exec", netns_host.netns), config_lines=lines)
            assert server is not None, log
            servers[name] = server
        yield servers
    finally:
        for server in servers.values():
            server._stop()


def laptop(tmp_path, ssh_keys, user, body, known=()):
    """A laptop home whose ssh config is `body` plus the laptop's key and known_hosts for every host."""
    home = tmp_path / ("home-" + uuid.uuid4().hex[:6])
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    kh = home / ".ssh" / "known_hosts"
    kh.write_text("".join("%s %s\n" % pair for pair in known))
    (home / ".ssh" / "config").write_text(body.format(kh=kh, key=ssh_keys.client_key, home=home) + (
        "\nHost *\n    User %s\n    IdentityFile %s\n    IdentitiesOnly yes\n    UserKnownHostsFile %s\n"
        % (user, ssh_keys.client_key, kh)))
    return home


def known_name(server):
    return server.host if server.port == 22 else "[%s]:%d" % (server.host, server.port)


def test_a_two_hop_jump_chain_and_a_proxy_command_land_where_ssh_lands(chain, ssh_keys, host_user, tmp_path, host_python):
    hop1, hop2, target = chain["hop1"], chain["hop2"], chain["target"]
    user = host_user.name
    home = laptop(tmp_path, ssh_keys, host_user.name, (
        "Host target  # the last hop given as an ssh:// URI with its own port, as ssh takes it\n"
        "    HostName %s\n    User %s\n    ProxyJump ssh://%s@first:2200,second\n"
        "Host first\n    HostName %s\n"
        "Host second\n    HostName %s\n"
        "Host via-command\n    HostName %s\n    ProxyCommand ssh -F {home}/.ssh/config -W %%h:%%p -p 2200 first\n"
        "Host loop-a\n    ProxyJump loop-b\nHost loop-b\n    ProxyJump loop-a\n"
        "Host target-past-a-changed-hop\n    HostName %s\n    ProxyJump %s@first:2200,second-changed\n"
        "Host second-changed\n    HostName %s\n    HostKeyAlias changed-hop\n"
    ) % (TARGET, user, user, hop1.host, HOP2, HOP2, TARGET, user, HOP2),
        known=[(known_name(s), s.host_key_pub) for s in (hop1, hop2, target)] + [("changed-hop", ssh_keys.wrong_host_key_pub)])

    before = {name: logins(server) for name, server in chain.items()}
    result = run_cli("run", "target", "--python", host_python, "--json", "--", "true", home=home)
    assert result.returncode == 0, result.stderr
    assert all(landed(server, before[name]) for name, server in chain.items()), {n: s.log_text()[-400:] for n, s in chain.items()}
    # What OpenSSH itself does with the same config lands on the same sshd.
    live = run_cli_ssh(home, "target")
    assert live.returncode == 0 and landed(target, before["target"] + 1), live.stderr

    before = logins(hop2)
    result = run_cli("run", "via-command", "--python", host_python, "--json", "--", "true", home=home)
    assert result.returncode == 0, result.stderr
    assert landed(hop2, before)

    # A hop whose key changed is refused on the way, --accept-new or not: nobody past it is reached.
    before = {name: logins(server) for name, server in chain.items()}
    bad_hop = run_cli("run", "target-past-a-changed-hop", "--python", host_python, "--accept-new", "--", "true", home=home)
    assert bad_hop.returncode == 2 and "HOST KEY CHANGED for changed-hop" in bad_hop.stderr, bad_hop.stderr
    assert logins(hop2) == before["hop2"] and logins(target) == before["target"]

    looped = run_cli("jobs", "loop-a", "--python", host_python, home=home)
    assert looped.returncode == 2 and "loops" in looped.stderr and "Traceback" not in looped.stderr
    assert len(looped.stderr.strip().splitlines()) == 1, looped.stderr


def run_cli_ssh(home, dest):
    import subprocess

    env = dict(os.environ, **ssh_config_env(home))
    return subprocess.run(["ssh", "-F", env["SPECDECK_SSH_CONFIG"], "-o", "BatchMode=yes", dest, "true"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_config_kinds_ssh_honours_land_where_ssh_lands(netns_host, sshd, ssh_keys, host_user, tmp_path, host_python):
    user = host_user.name
    included = tmp_path / "included.conf"
    included.write_text("Host from-include\n    HostName 127.0.0.1\n    Port %d\n" % sshd.port)
    home = laptop(tmp_path, ssh_keys, host_user.name, (
        "Include %s\n"
        "Match user %s host matched\n    HostName 127.0.0.1\n    Port %d\n"
        "Host matched\n    HostName 127.0.0.9\n    Port 9\n"
        "Host named-port\n    HostName %s\n    Port ssh\n    User %s # a comment, not part of the name\n"
        "Host node[12]\n    HostName 127.0.0.1\n    Port %d\n"
        "Host tokened-key\n    HostName 127.0.0.1\n    Port %d\n    IdentityFile ${{KEYS}}/%%r_at_%%p\n    IdentityAgent none\n"
        "    IdentitiesOnly yes\n"
    ) % (included, user, sshd.port, netns_host.host, user, sshd.port, sshd.port),
        known=[(known_name(sshd), sshd.host_key_pub), (netns_host.host, netns_host.host_key_pub)])

    # A key of its own named with tokens and a variable: the login the sshd took says which key.
    import subprocess

    keys = tmp_path / "keys"
    keys.mkdir()
    own_key = keys / ("%s_at_%d" % (user, sshd.port))
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(own_key)], check=True)
    with open(ssh_keys.authorized_keys, "a") as authorized:
        authorized.write(Path(str(own_key) + ".pub").read_text())
    own_fingerprint = subprocess.run(["ssh-keygen", "-lf", str(own_key) + ".pub"], capture_output=True, text=True).stdout.split()[1]
    for dest, server in (("from-include", sshd), (user + "@matched", sshd), ("named-port", netns_host), ("node[12]", sshd),
                         ("tokened-key", sshd)):
        before = logins(server)
        result = run_cli("jobs", dest, "--python", host_python, home=home, env={"KEYS": str(keys)})
        assert result.returncode == 0, (dest, result.stderr)
        assert landed(server, before), dest
    accepted = [line for line in sshd.log_text().splitlines() if "Accepted publickey for" in line]
    assert own_fingerprint in accepted[-1]  # tokened-key's login, by the key its tokens name
    # Without the user typed the Match does not apply, for ssh as for specdeck: port 9, nobody there.
    unmatched = run_cli("jobs", "matched", "--python", host_python, home=home, env={"KEYS": str(keys)})
    assert unmatched.returncode == 2 and "127.0.0.9" in unmatched.stderr


def test_a_host_only_the_system_config_defines(sshd, ssh_keys, tmp_path, host_python):
    alias = "specdeck-system-" + uuid.uuid4().hex[:8]
    kh = tmp_path / "system_known_hosts"
    kh.write_text("%s %s\n" % (known_name(sshd), sshd.host_key_pub))
    dropin = Path("/etc/ssh/ssh_config.d") / (alias + ".conf")
    if not Path("/etc/ssh/ssh_config").exists() or "ssh_config.d" not in Path("/etc/ssh/ssh_config").read_text():
        pytest.skip("this system's ssh_config includes no ssh_config.d")
    dropin.write_text("Host %s\n    HostName 127.0.0.1\n    Port %d\n    User %s\n    IdentityFile %s\n    UserKnownHostsFile %s\n"
                      % (alias, sshd.port, sshd.user, ssh_keys.client_key, kh))
    try:
        before = logins(sshd)
        home = tmp_path / "bare-home"
        home.mkdir()
        result = run_cli("jobs", alias, "--python", host_python, home=home)
        assert result.returncode == 0, result.stderr
        assert landed(sshd, before)
    finally:
        dropin.unlink()


def test_a_changed_key_behind_a_tokened_known_hosts_file_is_refused_everywhere(sshd, ssh_keys, tmp_path, host_python, monkeypatch):
    kh_dir = tmp_path / "kh"
    kh_dir.mkdir()
    planted = kh_dir / ("kh_127.0.0.1_%d" % sshd.port)
    planted.write_text("%s %s\n" % (known_name(sshd), ssh_keys.wrong_host_key_pub))
    home = laptop(tmp_path, ssh_keys, sshd.user, (
        "Host tokened\n    HostName 127.0.0.1\n    Port %d\n    UserKnownHostsFile %s/kh_%%h_%%p\n"
        "Host lenient\n    HostName 127.0.0.1\n    Port %d\n    UserKnownHostsFile ${{KH_DIR}}/kh_%%h_%%p\n    StrictHostKeyChecking no\n"
    ) % (sshd.port, kh_dir, sshd.port))
    before, kept = logins(sshd), planted.read_text()

    accept = run_cli("jobs", "tokened", "--python", host_python, "--accept-new", home=home)
    assert accept.returncode == 2 and "HOST KEY CHANGED" in accept.stderr and sshd.host_fingerprint in accept.stderr
    lenient = run_cli("jobs", "lenient", "--python", host_python, "--accept-new", home=home, env={"KH_DIR": str(kh_dir)})
    assert lenient.returncode == 2 and "HOST KEY CHANGED" in lenient.stderr and "StrictHostKeyChecking no" in lenient.stderr
    assert planted.read_text() == kept and logins(sshd) == before  # nothing recorded, nobody logged in
    # OpenSSH's own verdict on the same files.
    live = run_cli_ssh(home, "tokened")
    assert live.returncode != 0 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in live.stderr


async def test_the_console_refuses_a_changed_key_behind_a_tokened_file_without_asking(sshd, ssh_keys, tmp_path, host_python, monkeypatch):
    from tui.app import SpecdeckApp
    from tui.screens.host_key import HostKeyScreen

    kh_dir = tmp_path / "kh"
    kh_dir.mkdir()
    (kh_dir / "kh_127.0.0.1").write_text("%s %s\n" % (known_name(sshd), ssh_keys.wrong_host_key_pub))
    home = laptop(tmp_path, ssh_keys, sshd.user, "Host tokened\n    HostName 127.0.0.1\n    Port %d\n    UserKnownHostsFile %s/kh_%%h\n"
                  % (sshd.port, kh_dir))
    use_home(monkeypatch, home)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    asked = []
    app = SpecdeckApp(host="tokened", python=host_python)
    async with app.run_test(size=(120, 32)) as pilot:
        await wait_until(pilot, lambda: asked.append(isinstance(app.screen, HostKeyScreen)) or app.connection_state == "failed",
                         message="the refusal")
        assert not any(asked)
        header = header_text(app)
        assert "HOST KEY CHANGED" in header and sshd.host_fingerprint in header


def test_without_an_ssh_client_paramikos_reader_is_used_with_one_line_naming_what_it_cannot_honour(sshd, ssh_keys, tmp_path, host_python):
    bare = tmp_path / "no-ssh-here"
    bare.mkdir()
    home = laptop(tmp_path, ssh_keys, sshd.user, "Include %s/none-*.conf\nHost plain\n    HostName 127.0.0.1\n    Port %d\n"
                  % (tmp_path, sshd.port), known=[(known_name(sshd), sshd.host_key_pub)])
    before = logins(sshd)
    result = run_cli("jobs", "plain", "--python", host_python, home=home, env={"PATH": str(bare)})
    assert result.returncode == 0, result.stderr
    assert landed(sshd, before)
    warning = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(warning) == 1 and "no ssh client is installed" in warning[0] and "does not honour include" in warning[0]
