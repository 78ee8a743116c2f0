"""The profiling pass's range names: the step's phases (run/train.py labels them with record_function) and the
pass's own `data_wait` and `step`. One module, torch-free, read by profiling.py and op_events.py alike."""

PHASE_H2D = "h2d_copy"
PHASE_FORWARD = "forward"
PHASE_BACKWARD = "backward"
PHASE_OPTIMIZER = "optimizer"
PHASE_ALL_REDUCE = "all_reduce"
PHASES = (PHASE_H2D, PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER, PHASE_ALL_REDUCE)
DATA_WAIT = "data_wait"
STEP = "step"
