"""The data layer: distribution families, the prompt grid, canonical output spaces and their token tries."""
