"""The user-facing errors and their one line: every layer may raise `ConfigError` without importing the config
module (which would make model <-> config and parallel <-> config import circles), and every command prints
its error through `one_line` / `fail` / `OneLineParser` (the CLI's promise: one line, exit code 2)."""
from __future__ import annotations

import argparse
import sys


class ConfigError(ValueError):
    """A bad configuration: the message is one line meant for the user (the CLI prints it, exit code 2)."""


def choice(key: str, value: str, options: tuple[str, ...]) -> None:
    """One line naming the key, its value and the allowed choices, when `value` is not one of them."""
    if value not in options:
        raise ConfigError(f"{key}={value!r}: must be one of {', '.join(options)}")


def one_line(message: str) -> str:
    """A message that echoes user input (a path, a value) stays one line: line breaks are shown escaped."""
    return "\\n".join(message.splitlines())


def fail(message: str) -> int:
    print(f"shardlab: error: {one_line(message)}", file=sys.stderr)
    return 2


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; the CLI's promise is one line."""

    def error(self, message: str):
        print(f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)
