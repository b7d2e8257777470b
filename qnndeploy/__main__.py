"""`python -m qnndeploy`: the same command line as the `qnndeploy` script."""
from qnndeploy.cli import main

main()
