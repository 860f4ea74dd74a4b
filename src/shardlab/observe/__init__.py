"""Observation: timeline spans, Chrome/Perfetto traces, overlap and straggler analysis, memory."""
