"""The user-facing error every layer may raise without importing the config module (which would make
model ↔ config and parallel ↔ config import circles)."""


class ConfigError(ValueError):
    """A bad configuration: the message is one line meant for the user (the CLI prints it, exit code 2)."""
