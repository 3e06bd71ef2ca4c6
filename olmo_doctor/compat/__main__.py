"""`python3 -m olmo_doctor.compat pick ...`: install.sh's question, answered by pick.py (standard library only)."""

import sys

from olmo_doctor.compat.pick import main

sys.exit(main())
