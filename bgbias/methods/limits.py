"""The limits that methods' options and the training configuration's settings share, with the words an error
uses."""

from typing import Annotated, Any, Literal

from pydantic import Field

from bgbias.options import Must

AtLeastOne = Annotated[int, Field(ge=1), Must("a whole number of at least 1")]
Positive = Annotated[float, Field(gt=0), Must("a positive number")]
ZeroOrMore = Annotated[float, Field(ge=0), Must("0 or more")]
Fraction = Annotated[float, Field(ge=0, le=1), Must("in [0, 1]")]


def one_of(*choices: str) -> Any:
    return Annotated[Literal[choices], Must("one of: " + ", ".join(choices))]
