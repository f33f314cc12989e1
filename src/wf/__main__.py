from wf.cli.app import main

main()
