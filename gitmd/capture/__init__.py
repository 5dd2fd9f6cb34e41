"""Capture: the shim's rings read as hostile input, decoded to numpy, windows opened and closed."""
