from qnndeploy.cli import main

main()
