"""The ``guard`` command line: one module per subcommand (``register`` adds its parser;
its handler parses once, calls a ``guard.ops`` function and renders the result)."""
