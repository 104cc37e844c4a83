"""The test suite. Its shared helpers (``tests.support``) get pytest's assert rewriting, as test
modules do, so a failed assert inside one shows the values it compared."""

import pytest

pytest.register_assert_rewrite("tests.support")
