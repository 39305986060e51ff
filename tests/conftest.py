"""Settings shared by every unit test: a failing hypothesis example prints the blob that replays it
(``@reproduce_failure``). Under CI (``CI`` set) the property tests draw the same examples on every run
(``derandomize``), so a red run is a regression in the change, never a new random draw; developers' runs
keep drawing new examples and save the failing ones in ``.hypothesis``."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("perfsched", print_blob=True)
settings.register_profile("perfsched-ci", print_blob=True, derandomize=True, database=None)
settings.load_profile("perfsched-ci" if os.environ.get("CI") else "perfsched")
