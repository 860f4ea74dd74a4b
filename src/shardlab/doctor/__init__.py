"""The doctor: NaN/spike localisation, replica checksums, the hang watchdog and flight-recorder analysis,
uneven inputs and fault injection. See docs/doctor.md. The trainer uses `Doctor`; the CLI is
`shardlab doctor hang|replay` (shardlab.cli.doctor). The names below load core.py (and torch) on first
use: config validation parses fault specs through this package before any rank exists."""
from shardlab.lazy import lazy_names

__all__ = ["Doctor", "AnomalyError", "UnevenInputsError"]
__getattr__ = lazy_names(__name__, {name: "core" for name in __all__})
