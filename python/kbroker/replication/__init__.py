"""Partitions, their leadership, high watermarks and (later) followers."""
