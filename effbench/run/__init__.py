"""One run: the runner (prepare -> measure -> finish -> write), train loop, timing, runtime, optimizers, progress, fault hooks.
May import launch/ (the process group), measure/, analysis/ and report/; nothing imports run/ but cli/ and sweep/."""
