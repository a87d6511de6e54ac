import pytest

from jarvice.redaction import redact
from tests.support.deadlines import HANG_SECONDS

pytestmark = pytest.mark.timeout(HANG_SECONDS)

KEY = "s3cr3t/K+y=ü"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GET /jarvice/status?username=a&apikey=abc123&number=1", "GET /jarvice/status?username=a&apikey=***&number=1"),
        ("url: https://h/api/jarvice/tail?APIKEY=xyz", "url: https://h/api/jarvice/tail?APIKEY=***"),
        ('{"user": {"username": "a", "apikey": "abc\\"d"}}', '{"user": {"username": "a", "apikey": "***"}}'),
        ("{'apikey': 'abc'}", "{'apikey': '***'}"),
        ("nothing to hide", "nothing to hide"),
    ],
    ids=["query", "query-case", "json", "python-repr", "clean"],
)
def test_patterns(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        f"the key is {KEY} here",
        'json: "s3cr3t/K+y=\\u00fc"',
        "quoted: s3cr3t%2FK%2By%3D%C3%BC",
        "plus: s3cr3t%2FK%2By%3D%C3%BC",
    ],
    ids=["literal", "json-escaped", "percent-encoded", "quote-plus"],
)
def test_literal_secret_in_any_encoding(text: str) -> None:
    assert "s3cr3t" not in redact(text, [KEY])


def test_short_secrets_are_not_masked_literally() -> None:
    assert redact("a cat", ["a"]) == "a cat"
