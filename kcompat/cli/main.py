"""The ``kcompat`` command. Today: ``kcompat broker``; more subcommands later."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

from kcompat.broker import config as broker_config
from kcompat.broker.configdef import ConfigError


def _broker_parser(sub: Any) -> None:
    p = sub.add_parser("broker", help="run a broker (default: 127.0.0.1:9092, data in ./data)")
    p.add_argument("--config", type=Path, help="YAML file of broker config keys")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", help="listen port (default 9092; 0 picks a free one)")
    p.add_argument("--data-dir", help="data directory (log.dirs; default ./data)")
    p.add_argument("--node-id", help="node.id (default 1)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="any broker config key, e.g. --set num.partitions=3")
    p.add_argument("--print-config", action="store_true", help="print the effective config")


def _flags(args: argparse.Namespace) -> dict[str, Any]:
    flags: dict[str, Any] = {}
    for key, attr in (("host", "host"), ("port", "port"), ("log.dirs", "data_dir"),
                      ("node.id", "node_id")):
        value = getattr(args, attr)
        if value is not None:
            flags[key] = value
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(item, "--set takes KEY=VALUE")
        flags[key.strip()] = value
    return flags


def _setup_logging() -> None:
    level = os.environ.get("KCOMPAT_LOG_LEVEL", "INFO").upper()
    logging.basicConfig(
        level=getattr(logging, level, logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def cmd_broker(args: argparse.Namespace) -> int:
    import trio

    from kcompat.broker.server import run_broker

    cfg = broker_config.load(args.config, _flags(args), os.environ)
    if args.print_config:
        for key in sorted(cfg.values):
            definition = broker_config.BROKER_CONFIGS[key]
            print(f"{key}={definition.render(cfg.values[key])}")
        return 0
    _setup_logging()
    try:
        trio.run(run_broker, cfg)
    except KeyboardInterrupt:
        pass
    except OSError as e:
        print(f"kcompat: error: cannot start broker: {e}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kcompat", description="Kafka-compatible broker")
    sub = parser.add_subparsers(dest="command", required=True)
    _broker_parser(sub)
    args = parser.parse_args(argv)
    try:
        if args.command == "broker":
            return cmd_broker(args)
    except ConfigError as e:
        print(f"kcompat: error: {e}", file=sys.stderr)
        return 2
    return 2


if __name__ == "__main__":
    sys.exit(main())
