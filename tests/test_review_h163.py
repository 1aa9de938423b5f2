"""helper-163: small defects earlier sessions noticed and left alone, each test red before its fix."""
import pytest

from controller import numtext


@pytest.mark.parametrize("text, end", [
    ("1e-308", "(a float's least is 2.2e-308; under it a float keeps fewer digits)"),     # was 'read as 1e-308'
    ("-1.0e-310", "(a float's least is 2.2e-308; under it a float keeps fewer digits)"),
    ("3e-320", "(a float's least is 2.2e-308; under it a float keeps fewer digits: it would be read as 2.99997e-320)"),
    ("1e-400", "(a float's least is 2.2e-308: it would be read as 0)")])
def test_held_floats_refusal_says_what_it_would_be_read_as_only_where_that_differs(text, end):
    with pytest.raises(numtext.Unheld) as e:
        numtext.held_float(text)
    assert str(e.value) == f"{text} is closer to 0 than a number here can be {end}"

