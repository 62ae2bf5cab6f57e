"""The ``ragen`` command line. Thin: parses arguments and calls the public API."""


def positive_int(text: str) -> int:
    """argparse type: an int >= 1 (``--episodes -1`` is refused with exit 2 instead of doing nothing)."""
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value
