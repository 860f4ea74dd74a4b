"""The doctor: NaN/spike localisation, replica checksums, the hang watchdog and flight-recorder analysis,
uneven inputs and fault injection. See docs/doctor.md. The trainer uses `Doctor`; the CLI is
`shardlab doctor hang|replay` (shardlab.cli.doctor). The names below load core.py (and torch) on first
use: config validation parses fault specs through this package before any rank exists."""
__all__ = ["Doctor", "AnomalyError", "UnevenInputsError"]


def __getattr__(name):
    if name in __all__:
        from shardlab.doctor import core

        return getattr(core, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
