"""Analysis: pure functions over numpy arrays (timelines, steps, fingerprints, attribution)."""
