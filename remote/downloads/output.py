"""What leaves a download job: every string scrubbed of the tokens this process knows of, the
timestamped log on stdout, one-line messages, sizes and digests formatted for people, and small
files replaced whole."""

from __future__ import annotations

import os
import re
import sys
import threading
import time

GB = 1000 ** 3


class _Secrets:
    def __init__(self):
        self.values = set()

    def add(self, value):
        if isinstance(value, str) and len(value.strip()) >= 6:
            self.values.add(value.strip())

    def scrub(self, text):
        if not isinstance(text, str):
            text = str(text)
        for v in sorted(self.values, key=len, reverse=True):
            if v in text:
                text = text.replace(v, "<token>")
        text = re.sub(r"\bhf_[A-Za-z0-9]{16,}", "hf_<token>", text)
        text = re.sub(r"(?i)(bearer\s+)[^\s'\",]+", r"\1<token>", text)
        return text


_SECRETS = _Secrets()
for _name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
    _SECRETS.add(os.environ.get(_name))


def remember_secret(value):
    """From now on, scrub() hides `value` (a token found by huggingface_hub, say)."""
    _SECRETS.add(value)


def scrub(text):
    """`text` without any token this process knows of."""
    return _SECRETS.scrub(text)


def one_line(text, limit=400):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


_LOG_LOCK = threading.Lock()


def log(message):
    line = "%s %s" % (time.strftime("%H:%M:%S"), scrub(message))
    with _LOG_LOCK:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except (OSError, ValueError):
            pass


def fmt_gb(n):
    """2382319104 -> '2.38 GB'; 4465131 -> '4.47 MB': decimal units, as the hub shows sizes,
    scaled so the figure reads at a glance (never '0.00447 GB')."""
    if n is None:
        return "? GB"
    value = float(n)
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            break
        value /= 1000.0
    if unit == "bytes":
        return "%d bytes" % n
    return "%.2f %s" % (value, unit)


def fmt_size(n):
    """2382319104 -> '2.38 GB (2,382,319,104 bytes)'; small sizes in bytes only."""
    if n < 10 ** 6:
        return "%s bytes" % format(n, ",")
    return "%s (%s bytes)" % (fmt_gb(n), format(n, ","))


def short(digest):
    return (digest or "?")[:12] + ".."
