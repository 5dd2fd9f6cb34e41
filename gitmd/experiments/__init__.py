"""Experiments: equivalence contracts (now), plans, runs and decisions (the levers work)."""
