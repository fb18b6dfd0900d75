"""Plots: the pieces every figure is built from, the heatmaps, the layer × head map and the grid of heads."""
