"""Reading a Prometheus text page in the tests, with prometheus_client's own parser (as sim's group run
does), not by splitting lines."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def by_label(text: str, sample: str, label: str) -> dict[str, float]:
    """The values of the samples named `sample` (e.g. `stagger_lockd_waits_given_up_total`), by the value
    of their label `label`."""
    return {
        each.labels[label]: float(each.value)
        for family in text_string_to_metric_families(text)
        for each in family.samples
        if each.name == sample and label in each.labels
    }
