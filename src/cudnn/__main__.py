"""``python -m cudnn``: the command line of cudnn.cli, under the name it was started by."""

from .cli import main

raise SystemExit(main(prog="python -m cudnn"))
