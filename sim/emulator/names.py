"""Name and label syntax checks worded like the real ones: k8s.io/apimachinery/pkg/api/validate/content
(v0.36: IsLabelKey alias IsQualifiedName, IsLabelValue, IsDNS1123Label, IsDNS1123Subdomain). Each returns
the list of problems (empty when valid); the real validators turn each into its own field error."""

from __future__ import annotations

import re

_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character"
)
_LABEL_KEY = re.compile(f"^{_LABEL_KEY_FMT}$")
_LABEL_VALUE_FMT = f"({_LABEL_KEY_FMT})?"
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character"
)
_LABEL_VALUE = re.compile(f"^{_LABEL_VALUE_FMT}$")
_DNS_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character"
)
_DNS_LABEL = re.compile(f"^{_DNS_LABEL_FMT}$")
_DNS_SUBDOMAIN_FMT = _DNS_LABEL_FMT + "(\\." + _DNS_LABEL_FMT + ")*"
_DNS_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character"
)
_DNS_SUBDOMAIN = re.compile(f"^{_DNS_SUBDOMAIN_FMT}$")
LABEL_MAX = 63
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253


def regex_error(message: str, regex: str, *examples: str) -> str:
    """content.RegexError (its odd double spaces included)."""
    if not examples:
        return f"{message} (regex used for validation is '{regex}')"
    listed = "".join(("" if i == 0 else " or ") + f"'{example}', " for i, example in enumerate(examples))
    return f"{message} (e.g. {listed}regex used for validation is '{regex}')"


def max_len_error(length: int) -> str:
    return f"must be no more than {length} bytes"


def _length(value: str) -> int:
    return len(value.encode())  # Go's len() counts bytes


def qualified_name_problems(value: str) -> list[str]:
    """IsQualifiedName (= IsLabelKey): an optional DNS subdomain prefix and '/', then a name part."""
    problems: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            problems.extend(f"prefix part {p}" for p in dns1123_subdomain_problems(prefix))
    else:
        return [
            "a valid label key "
            + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        problems.append("name part must be non-empty")
    elif _length(name) > LABEL_MAX:
        problems.append("name part " + max_len_error(LABEL_MAX))
    if not _LABEL_KEY.match(name):
        problems.append(
            "name part " + regex_error(_LABEL_KEY_MSG, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
        )
    return problems


def label_value_problems(value: str) -> list[str]:
    problems: list[str] = []
    if _length(value) > LABEL_MAX:
        problems.append(max_len_error(LABEL_MAX))
    if not _LABEL_VALUE.match(value):
        problems.append(regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return problems


def dns1123_label_problems(value: str) -> list[str]:
    problems: list[str] = []
    if _length(value) > DNS_LABEL_MAX:
        problems.append(max_len_error(DNS_LABEL_MAX))
    if not _DNS_LABEL.match(value):
        if _DNS_SUBDOMAIN.match(value):
            problems.append("must not contain dots")
        else:
            problems.append(regex_error(_DNS_LABEL_MSG, _DNS_LABEL_FMT, "my-name", "123-abc"))
    return problems


def dns1123_subdomain_problems(value: str) -> list[str]:
    problems: list[str] = []
    if _length(value) > DNS_SUBDOMAIN_MAX:
        problems.append(max_len_error(DNS_SUBDOMAIN_MAX))
    if not _DNS_SUBDOMAIN.match(value):
        problems.append(regex_error(_DNS_SUBDOMAIN_MSG, _DNS_SUBDOMAIN_FMT, "example.com"))
    return problems
