from coolsd.bench.cli import main

raise SystemExit(main())
