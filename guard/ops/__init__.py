"""The guard's operations, one typed function each: measure a suite, compare two trees
or files, refresh a baseline, shard a check, compile ahead, find a step's commit, and
the PR check (``check.run_check``). They return values and raise ``GuardError`` with
its exit code; none prints (progress and log lines go to the callbacks passed in)."""
