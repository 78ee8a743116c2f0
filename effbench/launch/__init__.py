"""Launching ranks: pure torchrun/Slurm argv planning, supervision of the child group, process-group setup.
Must not import the training loop or reporting."""
