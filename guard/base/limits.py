"""Size limits on what the guard reads, in one place.

Files larger than these are refused on load (``BadInput``: the limit and what the
file had, exit 2) rather than read until memory runs out: with them, ``guard compare``
of any two files stays under 1 GB of memory. Only regular files are read at all
(``guard.base.files``): a FIFO, a device or a directory is refused the same way, since
``stat`` says nothing of what reading one would cost. What the guard writes stays inside
them (the suite reader applies the round and sample limits to the timing plan).
Plots in the HTML report are thinned instead (``guard.report.svg``), and say so.
"""

from __future__ import annotations

# Results and baseline files (guard JSON or pytest-benchmark JSON). Parsing JSON costs
# up to about 12 bytes of memory per byte of text, and 100 per bracket, hence both caps.
MAX_FILE_BYTES = 16 * 1024 * 1024  # a guard file with one case at its limit is 15 MB
# A pytest-benchmark run is read as a stream, one benchmark at a time, each benchmark's
# samples reduced as read (guard.store.pytest_runs): its defaults write 55-62 MB a run.
MAX_PYTEST_FILE_BYTES = 4 * 1024**3
MAX_CONTAINERS = 1_000_000  # JSON lists and objects ('[' and '{' in the text)
MAX_CASES = 1000  # cases (benchmarks) in one file; the default suite has under 100
MAX_ROUNDS_PER_CASE = 200  # fresh processes per case and arm; the suite uses 6 to 20
MAX_SAMPLES_PER_ROUND = 200_000  # a pytest-benchmark file is one round (real ones: 194k)
MAX_SAMPLES_PER_CASE = 250_000  # over all rounds of a case (and again for host times)
MAX_SAMPLES_PER_FILE = 2_000_000  # over all cases, device and host times
MIN_TIME_S = 1e-12  # a per-call time outside [MIN, MAX] is not a measurement (and
MAX_TIME_S = 1e5  # keeps every ratio, sum and rate computed from times finite)
MAX_INT = 2**63  # an integer field beyond this is corrupt (and overflows float())

# Suite files (YAML).
MAX_SUITE_BYTES = 256 * 1024  # a suite is a few kilobytes
MAX_SUITE_DEPTH = 16  # nesting of mappings and lists; a suite needs 4
MAX_DIMENSION = 2**31 - 1  # a shape dimension (the kernels index with int32)

# Error messages quote at most this many characters of a value from a file.
MAX_SHOWN_CHARS = 200

# Plots in the HTML report: what is drawn beyond these is thinned, and the plot says so
# (each arm's box plot still summarises every sample).
MAX_PLOT_ROUNDS = 20  # round lanes per arm; evenly spaced rounds beyond that
MAX_PLOT_POINTS = 200  # dots per arm, shared by its lanes; evenly spaced quantiles
