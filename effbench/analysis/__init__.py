"""Pure analysis, data in and numbers or tables out: MFU, bottleneck verdict, statistics, windows, scaling, compare.
Must not import torch, run/ or report/."""
