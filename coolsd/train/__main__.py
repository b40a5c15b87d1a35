from coolsd.train.cli import main

raise SystemExit(main())
