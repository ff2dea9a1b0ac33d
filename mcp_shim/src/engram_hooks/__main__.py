from engram_hooks.core import main

raise SystemExit(main())
