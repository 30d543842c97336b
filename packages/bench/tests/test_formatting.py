"""Table formatters: three significant digits that read back to the value."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gptstack.bench.formatting import MISSING, format_value, num


@given(st.floats(min_value=1e-3, max_value=1e9))
def test_num_keeps_three_significant_digits(v):
    back = float(num(v).replace(",", ""))
    assert back == pytest.approx(v, rel=5e-3, abs=0.5)


def test_units_and_missing_values():
    assert format_value(None, "ms") == MISSING
    assert format_value(0.0123, "ms") == "12.3"
    assert format_value({"median": 2.0, "min": 1.5, "max": 3.0}, "ratio") == "2.00× [1.50–3.00]"
    assert format_value(0.4567, "pct") == "45.7 %"
    assert format_value(123456.7, "int") == "123,457"
