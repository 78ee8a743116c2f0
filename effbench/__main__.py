"""`python -m effbench ...` runs the same CLI as the `effbench` console script."""

from effbench.cli.app import main

if __name__ == "__main__":
    main()
