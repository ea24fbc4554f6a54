"""The ``kcompat`` command: ``broker`` runs one; the rest are Kafka clients.

``broker`` lives here; client commands are one module each (``topics``,
``produce``, ``consume``, ``groups``, ``cluster``) registering their parsers
and a ``func``. ``main`` is the single place that turns failures into one line
on stderr and an exit code: 0 ok, 1 failed (unknown topic, broker unreachable),
2 bad arguments or configuration, 130 interrupted.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import sys
from pathlib import Path
from typing import Any

from kcompat.broker.config import broker_config
from kcompat.broker.config.configdef import ConfigError
from kcompat.cli import _logging
from kcompat.cli._common import CliError, Parser, friendly


def _broker_parser(sub: Any) -> None:
    p = sub.add_parser("broker", help="run a broker (default: 127.0.0.1:9092, data in ./data)")
    p.add_argument("--config", type=Path, help="YAML file of broker config keys")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", help="listen port (default 9092; 0 picks a free one)")
    p.add_argument("--data-dir", help="data directory (log.dirs; default ./data)")
    p.add_argument("--node-id", help="node.id (default 1)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any broker config key, e.g. --set num.partitions=3")
    p.add_argument("--cores", help="shards: broker processes this node runs, one per core "
                                   "(kcompat.cores; default 1, 0 = every core)")
    p.add_argument("--print-config", action="store_true", help="print the effective config")
    p.add_argument("--log-level", help="DEBUG, INFO (default), WARNING or ERROR "
                                       "(env KCOMPAT_LOG_LEVEL)")
    p.add_argument("--log-format", help="text (default) or json (env KCOMPAT_LOG_FORMAT)")
    p.add_argument("--admin-port", help="HTTP port for /metrics and /health (admin.port; "
                                        "default 9644, 0 = any free port, -1 = off)")
    p.set_defaults(func=cmd_broker)


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    for key, attr in (("host", "host"), ("port", "port"), ("log.dirs", "data_dir"),
                      ("node.id", "node_id"), ("admin.port", "admin_port"),
                      ("kcompat.cores", "cores")):
        value = getattr(args, attr)
        if value is not None:
            flags[key] = value
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(item, "--set takes KEY=VALUE")
        flags[key.strip()] = value
    return flags


def cmd_broker(args: argparse.Namespace) -> int:
    # the broker itself (trio, the server) is imported only once this process
    # knows it runs one, not a node's supervisor: a supervisor stays small
    from kcompat.broker.node import shards

    cfg = broker_config.load(args.config, _flags(args), os.environ)
    level, log_format = _logging.resolve(args.log_level, args.log_format)
    if args.print_config:
        for key in sorted(cfg.values):
            definition = broker_config.definition_of(key)
            assert definition is not None  # load() took only keys it knows
            value = cfg.values[key]
            shown = "[hidden]" if definition.secret and value else definition.render(value)
            print(f"{key}={shown}")
        return 0
    _logging.setup(level, log_format)
    # a crash of the interpreter itself (a segfault) leaves every thread's
    # Python frames on stderr, not a silent exit
    faulthandler.enable()
    if shards.supervises(cfg):  # a node of several broker processes
        log_args = [f"--log-level={level}", f"--log-format={log_format}"]
        return shards.supervise(cfg, log_args)
    import trio

    from kcompat.broker.node.server import run_broker

    try:
        trio.run(run_broker, cfg)
    except KeyboardInterrupt:
        pass
    except OSError as e:
        print(f"kcompat: error: cannot start broker: {e}", file=sys.stderr)
        return 1
    return 0


def build_parser(broker_only: bool = False) -> argparse.ArgumentParser:
    """Every command's parser; ``broker_only``: the broker's alone, so that a
    broker process (and a node's supervisor) never imports the Kafka client
    the other commands are built on."""
    parser = Parser(prog="kcompat", description="A Kafka-compatible broker and its tools")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _broker_parser(sub)
    if not broker_only:
        from kcompat.cli import (
            acls,
            cluster,
            consume,
            dlq,
            groups,
            produce,
            quotas,
            scheduled,
            topics,
            users,
        )

        for module in (topics, produce, consume, groups, cluster, scheduled, dlq, acls, users,
                       quotas):
            module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    args = build_parser(broker_only=words[:1] == ["broker"]).parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except ConfigError as e:
        return _fail(str(e), 2)
    except CliError as e:
        return _fail(str(e), e.exit_code)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `kcompat consume t | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        nice = friendly(e, args)
        if nice is None:  # a bug in kcompat: keep the traceback so it can be fixed
            import traceback

            traceback.print_exception(e, file=sys.stderr)
            return _fail(f"unexpected {type(e).__name__}: {e}", 1)
        return _fail(str(nice), nice.exit_code)


def _fail(message: str, code: int) -> int:
    print(f"kcompat: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
