"""The bottom layer: errors and exit codes, input limits, escaping, bounded file reads,
the pure statistics and SIGTERM unwinding. Imports nothing of the guard above it."""
