"""gitmd: a host daemon that makes GPU jobs run closer to their hardware ceiling.

Runtime changes only, each kept when an experiment proves it faster with unchanged outputs.
"""

__version__ = "0.1.0"
