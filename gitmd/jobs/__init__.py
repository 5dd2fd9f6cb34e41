"""Jobs: the registry (job <-> processes <-> GPUs) and the launch plans handed to launchers."""
