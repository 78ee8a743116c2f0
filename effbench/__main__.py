"""`python -m effbench ...` runs the same CLI as the `effbench` console script."""

from effbench.cli import main

if __name__ == "__main__":
    main()
