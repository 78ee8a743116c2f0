"""What is observed beside a run: the utilisation sampler, the profiler pass, FLOPs counting.
Must not import run/, report/ or sweep/."""
