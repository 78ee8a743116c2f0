"""The `effbench` console script (pyproject.toml) and `python -m effbench`: the CLI, with a signal that comes
while its own modules are imported (typer, pydantic: a tenth of a second, more on a busy machine) held until
they are in, then ended as one that came in `cli.main`. Before, SIGTERM then killed the process with no word
(exit -15), and to a container's PID 1 it was lost.

    effbench run --smoke
    python -m effbench run --smoke
"""


def main() -> None:
    from effbench.run.phases import deferred  # torch-free, a few small modules

    held: list[int] = []
    with deferred(held):  # SIGTERM, SIGINT and SIGHUP recorded, not acted on, while the CLI is imported
        from effbench.cli.app import main as cli_main
    cli_main(held=held)  # installs its handlers, then a held signal ends the run as one arriving now: one line


if __name__ == "__main__":
    main()
