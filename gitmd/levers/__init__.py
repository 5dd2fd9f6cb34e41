"""Levers: the runtime interventions gitmd may try, each a small class (``base.Lever``).

``registry.CATALOG`` is the explicit table; its names are the lever names the attribution's
cause table (``gitmd.analysis.causes.LEVERS``) selects.
"""
