"""``python -m cudaperf_cli`` is the same as the ``cudaperf`` script."""

from cudaperf_cli.cli.main import main

if __name__ == "__main__":
    main()
