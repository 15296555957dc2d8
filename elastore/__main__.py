from elastore.cli import main

main()
