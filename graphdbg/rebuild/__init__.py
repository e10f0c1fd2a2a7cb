"""Descriptors to values: what a dump says of a graph's inputs, attributes and sizes, made real for replay."""
