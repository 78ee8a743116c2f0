"""Sweeps: spec (lists -> cells), presets, manifest, the sweep runner, scaling series.
Imports run/ lazily, only where a cell is run in-process."""
