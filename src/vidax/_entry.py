"""The ``vidax`` command's entry point: signal handling first, then the command line (:mod:`vidax.cli`).

A Ctrl-C or SIGTERM at any moment from here on ends the run with status 130 / 143 and no output published
(:mod:`vidax.core.signals`); the heavy imports run where a signal cannot interrupt them.
"""

import sys


def main() -> int:
    from vidax.core import signals

    signals.install()
    try:
        with signals.deferred():
            from vidax import cli
    except KeyboardInterrupt:
        print("vidax: interrupted; no output was written", file=sys.stderr)
        return 130
    except signals.Terminated:
        print("vidax: terminated; no output was written", file=sys.stderr)
        return 143
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
