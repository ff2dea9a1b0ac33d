from engram_server.cli import main

main()
