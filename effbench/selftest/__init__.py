"""`effbench selftest`: effbench's figures checked on this machine against references that do not share its code.
May import every stage (it drives whole runs); nothing but cli/ imports it."""
