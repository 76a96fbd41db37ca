from kvldp.cli import main

raise SystemExit(main())
