"""Running kernels: worker processes per round and arm, correctness and timing
in them, fingerprints, compiler resources, Nsight Compute profiles, child processes."""
