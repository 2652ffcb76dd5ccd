"""A toy attention kernel in plain torch, guarded by attn-guard (see README.md)."""
