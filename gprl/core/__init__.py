"""The data model: the population encoding, the function table, datasets, devices and file writes."""
