"""Control policies: evaluation in vectorised environments and formula export."""
