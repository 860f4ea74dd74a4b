"""Launching and keeping a run alive: the launcher (torchrun), its agent, failure verdicts, resume, the
signal, lock and orphan handling, and the worker pool the tests and bench use. See docs/training.md."""
