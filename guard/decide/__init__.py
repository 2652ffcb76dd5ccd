"""Deciding: a candidate run against a baseline (``compare``), the typed outcome
every renderer reads (``outcome``, standard library only), a PR's policy changes."""
