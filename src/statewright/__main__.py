from statewright.cli import main

main()
