"""Entry point of the agent: `python agent.pyz COMMAND ...` (or `python -m remote COMMAND`).

  relay            what SSH runs: a thin pipe between stdin/stdout and the daemon
                   (--if-running: only to a daemon already running, never starting one)
  daemon           start the per-user daemon (detached; `--foreground` to stay)
  supervise DIR    internal: lead one job's process group and record its exit
  download SPEC, download-plan SPEC, verify SPEC   the download job's steps
  serving-bench SPEC   the A/B benchmark job (baseline server, then speculative)
  node-sample      a cluster node's GPUs, one JSON line a sample (a step of a Slurm job)
  wire-reference   print the wire's reference (every method, frame and error type)
"""

import sys

if sys.version_info < (3, 9):
    sys.stderr.write("specdeck agent needs Python 3.9 or newer; %s is %d.%d\n" % ((sys.executable,) + sys.version_info[:2]))
    sys.exit(3)


def main(argv):
    if not argv:
        sys.stderr.write(__doc__)
        return 2
    command, rest = argv[0], argv[1:]
    if command in ("daemon", "wire-reference"):
        from . import areas  # the composition root: which areas the daemon and the reference have

        areas.install()
    if command == "relay":
        from .core.relay import run_relay

        return run_relay(start_daemon="--if-running" not in rest)
    if command == "daemon":
        from .core.daemon import run_daemon

        return run_daemon(foreground="--foreground" in rest)
    if command == "supervise":
        from .jobs.supervisor import supervise

        supervise(rest[0])
        return 0
    if command in ("download", "download-plan", "verify"):
        from .downloads import download

        return download.main(argv)
    if command == "serving-bench":
        from .serving import bench

        return bench.main(argv)
    if command == "node-sample":
        from .telemetry import node_sample

        return node_sample.main(rest)
    if command == "wire-reference":
        from .core.wire import reference

        sys.stdout.write(reference())
        return 0
    sys.stderr.write("unknown agent command %r\n%s" % (command, __doc__))
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
