"""The doctor: NaN/spike localisation, replica checksums, the hang watchdog and flight-recorder analysis,
uneven inputs and fault injection. See docs/doctor.md. The trainer uses `Doctor`; the CLI is
`shardlab doctor hang|replay` (shardlab.cli.doctor)."""
from shardlab.doctor.core import AnomalyError, Doctor, UnevenInputsError

__all__ = ["Doctor", "AnomalyError", "UnevenInputsError"]
