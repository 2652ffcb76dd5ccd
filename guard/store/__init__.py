"""What the guard reads and writes: suite files, results and baselines, the
history of runs (and its step detection), compiler-resource records."""
