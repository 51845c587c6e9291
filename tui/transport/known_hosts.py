"""known_hosts read the way OpenSSH reads it: host patterns, markers, hashed names.

paramiko's own reader rejects a whole file over one `@cert-authority` or `@revoked` line and
matches no wildcards or negations, so this small reader replaces it. What it follows
(OpenSSH's hostfile.c and match.c):
- a line is `[@marker] patterns keytype base64 [comment]`; the markers are `@revoked` and
  `@cert-authority` (any other marker makes OpenSSH skip the line, and us too);
- patterns are comma-separated, with `*` and `?` wildcards; a `!pattern` that matches rules
  the whole line out; names are compared case-insensitively;
- a port other than 22 is written `[host]:port`; a `|1|salt|hash` entry is HMAC-SHA1 of the
  name under the salt.
specdeck's client checks plain host keys, not host certificates, so `@cert-authority` lines
never vouch for a key here (OpenSSH, too, uses them for certificates only).
"""

import base64
import binascii
import hashlib
import hmac
import os
import re
from dataclasses import dataclass
from typing import List, Optional

MARKERS = ("@revoked", "@cert-authority")


@dataclass
class Entry:
    path: str
    line_number: int
    marker: Optional[str]  # None, "@revoked" or "@cert-authority"
    patterns: str
    key_type: str
    key_blob: bytes

    @property
    def where(self):
        return "%s line %d" % (self.path, self.line_number)


def fingerprint_of_blob(blob):
    """`SHA256:...`, as `ssh-keygen -l` prints it."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def host_name(hostname, port, alias=None):
    """The name a host has in known_hosts: HostKeyAlias as it is, else host or [host]:port."""
    if alias:
        return alias.lower()
    hostname = hostname.lower()
    return hostname if port in (22, 0, None) else "[%s]:%d" % (hostname, port)


def _wildcard_match(name, pattern):
    """`*` and `?` against the whole name (OpenSSH's match_pattern: no character classes)."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, name, re.DOTALL) is not None


def patterns_match(patterns, name):
    """True when the comma-separated `patterns` select `name` (a matching `!pattern` vetoes)."""
    name = name.lower()
    positive = False
    for pattern in patterns.lower().split(","):
        negated = pattern.startswith("!")
        if negated:
            pattern = pattern[1:]
        if _wildcard_match(name, pattern):
            if negated:
                return False
            positive = True
    return positive


def _hashed_match(entry_name, name):
    # |1|base64(salt)|base64(HMAC-SHA1(salt, name))
    parts = entry_name.split("|")
    if len(parts) != 4 or parts[1] != "1":
        return False
    try:
        salt = base64.b64decode(parts[2], validate=True)
        expected = base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError):
        return False
    return hmac.compare_digest(hmac.new(salt, name.lower().encode(), hashlib.sha1).digest(), expected)


def hashed_name(name, salt=None):
    salt = salt if salt is not None else os.urandom(20)
    digest = hmac.new(salt, name.lower().encode(), hashlib.sha1).digest()
    return "|1|%s|%s" % (base64.b64encode(salt).decode(), base64.b64encode(digest).decode())


def read_entries(path):
    """Every usable line of one known_hosts file (a missing file has none)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    entries = []
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = None
        if fields[0].startswith("@"):
            if fields[0] not in MARKERS:
                continue
            marker, fields = fields[0], fields[1:]
        if len(fields) < 3:
            continue
        try:
            blob = base64.b64decode(fields[2], validate=True)
        except (binascii.Error, ValueError):
            continue  # a damaged key: OpenSSH skips the line as well
        if blob_type(blob) != fields[1]:
            continue  # the type word is not the key's own: OpenSSH's sshkey_read skips the line
        entries.append(Entry(path, number, marker, fields[0], fields[1], blob))
    return entries


def blob_type(blob):
    """The key type a public key blob names itself (its first SSH string), or None."""
    if len(blob) < 4:
        return None
    size = int.from_bytes(blob[:4], "big")
    if size > len(blob) - 4 or size > 256:
        return None
    return blob[4:4 + size].decode("ascii", "replace")


def algorithm_family(name):
    """The key type a host key algorithm signs with: rsa-sha2-512 and ssh-rsa are both RSA keys."""
    if name in ("rsa-sha2-256", "rsa-sha2-512"):
        return "ssh-rsa"
    if name in ("rsa-sha2-256-cert-v01@openssh.com", "rsa-sha2-512-cert-v01@openssh.com"):
        return "ssh-rsa-cert-v01@openssh.com"
    return name


def revoked_in_file(path, key_blob):
    """RevokedHostKeys: where `path` lists `key_blob` ("PATH line N"), or None. A binary key
    revocation list, which this reader cannot read, revokes everything: refusing is safer than
    trusting a key the list may name."""
    try:
        with open(path, "rb") as f:
            data = f.read(16 << 20)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return "%s (unreadable: %s)" % (path, exc.strerror or exc)
    if data.startswith(b"SSHKRL\n"):
        return "%s (a binary key revocation list, which specdeck cannot read)" % path
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        fields = line.split()
        for word in fields[:3]:
            try:
                if base64.b64decode(word, validate=True) == key_blob:
                    return "%s line %d" % (path, number)
            except (binascii.Error, ValueError):
                continue
    return None


def entry_matches(entry, name):
    if entry.patterns.startswith("|"):
        return _hashed_match(entry.patterns, name)
    return patterns_match(entry.patterns, name)


def lookup(name, paths) -> List[Entry]:
    """The lines of `paths` that apply to the host called `name`, in file order."""
    return [entry for path in paths for entry in read_entries(path) if entry_matches(entry, name)]


@dataclass
class Verdict:
    status: str  # "known", "revoked", "changed" or "unknown"
    entries: List[Entry]  # the revoking line, the lines with other keys, or the CA lines


def check(name, key_blob, paths):
    """What known_hosts says about a host `name` offering `key_blob`."""
    entries = lookup(name, paths)
    revoked = [e for e in entries if e.marker == "@revoked" and e.key_blob == key_blob]
    if revoked:
        return Verdict("revoked", revoked)
    plain = [e for e in entries if e.marker is None]
    if any(e.key_blob == key_blob for e in plain):
        return Verdict("known", [e for e in plain if e.key_blob == key_blob])
    if plain:
        return Verdict("changed", plain)
    return Verdict("unknown", [e for e in entries if e.marker == "@cert-authority"])


def append(path, name, key_type, key_base64, hashed=False):
    """Remember a host key the way `ssh` does (HashKnownHosts hashes the name)."""
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    needs_newline = False
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            if f.tell():
                f.seek(-1, os.SEEK_END)
                needs_newline = f.read(1) != b"\n"
    except FileNotFoundError:
        pass
    with open(path, "a") as f:
        f.write("%s%s %s %s\n" % ("\n" if needs_newline else "", hashed_name(name) if hashed else name, key_type, key_base64))
