"""What the machine is and whether a run can work here: hardware probes, preflight checks and fixes, downloads.
Must not import training, analysis or reporting."""
