"""One shape for a verdict wherever specdeck gives one, on the wire and in the CLI's --json:
`{"status": word, "message": one line}`. A download's verification (`verified`, `mismatch`,
`corrupt`, `error`; `stopped` for one stopped when asked), a comparison of two checkpoints
(`compatible`, `incompatible`) and a training run's checkpoint (`ok`, `broken`, `incompatible`,
`below break-even`, ...) all say their word in `status` and why in `message`; anything more
sits beside the verdict.
Standard library only: both sides import it."""


def verdict(status, message):
    """The verdict object: `status` a word, `message` one line for a person."""
    return {"status": status, "message": message if message else status}


def of_comparison(result):
    """The verdict of remote.checkpoints.compatibility.compare (or check_against_target): its
    word and its first reason."""
    reasons = result.get("reasons") or []
    return verdict(result["verdict"], reasons[0] if reasons else "")


def of_word(word, reasons=None):
    """A verdict given as a bare word (with its reasons, if any), e.g. a training checkpoint's."""
    if isinstance(word, dict):  # already shaped
        return word
    reasons = reasons or []
    return verdict(word, reasons[0] if reasons else "")
