"""The workflow's planner: the configuration, where files go, the jobs built from the configuration, downloads,
locks, GPU memory and GPU-hours of a plan."""
