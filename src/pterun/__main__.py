from pterun.cli.main import main

main()
