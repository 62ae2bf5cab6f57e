"""The ``ragen`` command line. Thin: parses arguments and calls the public API."""
