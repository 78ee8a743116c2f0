"""One run: its launch (launch.py), each rank's body (rank.py: prepare -> measure -> finish), its run folder
(folder.py), train loop, timing, runtime, optimizers, progress, fault hooks.
May import launch/ (the process group), measure/ and analysis/, never report/ (the caller draws the reports); nothing imports run/ but cli/ and sweep/."""
